import sys

from vis_embed.cli import main

sys.exit(main())
