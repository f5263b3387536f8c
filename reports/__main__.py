from .compare_command import main

main()
