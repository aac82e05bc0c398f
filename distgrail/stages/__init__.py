"""The build pipeline, one module per stage: condense → forest (phase 1) → subtree (2) → ranks (3)
→ intervals (4); ``labeling`` runs phases 1–4. Each stage module holds its NumPy twin and its
CUDA launcher; the kernel source is ``kernels/<stage>.cu``. ``phases`` holds one entry per stage
for a whole DAG or one spread over the ranks (what the placements run)."""
