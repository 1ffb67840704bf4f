"""PowerTrain-style prediction of time and power over (batch size, full power mode).

`space` (the grid, features, sampling, tables; numpy), `mlp` (the MLPs, transfer and margins;
PyTorch only to train), `reference` (shipped reference models per board, `references/`),
`twin_data` (the device twin's tables as training and evaluation data; simulated). The
`predicted` profiling strategy that uses them on a device is `edgetrain.workloads`'.
"""
