"""The training loop and what it is built from: the recipe (recipe.py), the model and its adaptation
(model_setup.py), GradCache (gradcache.py), the objectives (losses/), the backends (torch / DeepSpeed),
checkpoints and run directories; `vis-embed train` and `merge` (cli.py).  See docs/training.md."""
