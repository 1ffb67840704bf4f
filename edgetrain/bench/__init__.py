"""Every benchmark: `planner` (selection), `predictor` (predicted profiles), `train` (the training
loop against a plain PyTorch loop), `paper` (the first paper's tables with real training and
twin hardware). Each reports ratios against a baseline measured in the same run."""
