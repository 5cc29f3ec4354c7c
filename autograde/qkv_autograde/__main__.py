from qkv_autograde.grading.grade_class import main

main()
