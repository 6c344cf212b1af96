"""The token history's pure rules, shared by the proxy and the trainer.

- `rules`: an episode's answered turns (`Turn`, `Turns`), which turn a call continues (`plan`) and the labels;
- `turn_boundary`: where a continued turn ends and the new messages' tokens after it, from two renderings;
- `shapes`: the shapes real agents take, run through these rules on one chat template (the trainer's preflight).

The proxy applies `rules` and `turn_boundary` to live calls (rendering through the engine's `/tokenize`); the trainer,
which holds the tokenizer, proves a job's template against them before any call (`shapes`). Nothing here imports a
server or a tensor library.
"""
