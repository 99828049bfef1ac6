from vis_embed.cli import run_as_program

# Guarded: preparation worker processes (model/runtime/prepare_pool.py) start by importing the main
# module as ``__mp_main__``; they must not run the command again.
if __name__ == "__main__":
    run_as_program()
