from .cli.analyze import entry

entry()
