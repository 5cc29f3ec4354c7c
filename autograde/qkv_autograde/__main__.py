from .grade_class import main

main()
