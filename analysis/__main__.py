from nsys_transfer.analysis.cli.analyze import entry

entry()
