"""`python -m infra.postgres start|stop --data-dir D`; see infra.postgres.cli."""

from infra.postgres.cli import main

raise SystemExit(main())
