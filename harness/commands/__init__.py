"""`bench`'s commands, one module each: `add_parser(subparsers)` declares the command's
flags, `run(args)` does it and returns the exit code. harness/cli.py only dispatches."""
