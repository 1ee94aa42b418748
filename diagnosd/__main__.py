"""`python -m diagnosd`."""

from diagnosd.cli import main

raise SystemExit(main())
