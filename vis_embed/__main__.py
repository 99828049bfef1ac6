from vis_embed.cli import run_as_program

run_as_program()
