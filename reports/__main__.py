from nsys_transfer.reports.cli import main

main()
