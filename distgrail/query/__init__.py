"""Queries: prefilters (steps 1–4), guided search (step 5), batches answered on the CPU or the GPU."""
