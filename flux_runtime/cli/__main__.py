import sys

from flux_runtime.cli import main

sys.exit(main())
