import sys

from physskin_gs.cli import main

sys.exit(main())
