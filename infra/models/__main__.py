"""`python -m infra.models start|stop --dir D`; see infra.models.cli."""

from infra.models.cli import main

raise SystemExit(main())
