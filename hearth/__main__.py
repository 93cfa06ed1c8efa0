import sys

from hearth.cli import main

sys.exit(main())
