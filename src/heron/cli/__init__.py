"""The ``heron`` command (meta distribution ``heron``).

Each subcommand is a module of this package with a ``register(subparsers)``
function; ``heron.cli.main.COMMANDS`` lists them. A subcommand module imports
what it needs inside its handler, so ``heron --help`` stays fast and one
broken subsystem does not take the other subcommands down with it.
"""

__version__ = "0.1.0"
