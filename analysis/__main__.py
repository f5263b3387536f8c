from nsys_transfer.analysis.cli import entry

entry()
