import sys

from gmpmon.cli import main

sys.exit(main())
