from nsys_transfer.reports.compare_command import main

main()
