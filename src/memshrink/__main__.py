"""`python -m memshrink ...`: the same CLI as the `memshrink` command."""

from memshrink.cli import main

raise SystemExit(main())
