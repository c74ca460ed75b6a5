from virtcap.cli import main

raise SystemExit(main())
