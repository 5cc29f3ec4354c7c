from qkv_hub.hub_setup import main

main()
