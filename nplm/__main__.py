from nplm.cli.main import main

raise SystemExit(main())
