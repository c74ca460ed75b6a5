"""The `virtcap` command line: one module per subcommand, each with its `add_parser` and `run`, and
`main`, which puts them together (the console script is `virtcap.commands.main:run`).

The top layer: it may import every other part of the package, and nothing in the package imports
it. This `__init__` imports nothing, so that a subcommand's module loads without the others.
"""
