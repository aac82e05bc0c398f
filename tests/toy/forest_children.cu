// A toy stage (docs/design.md, "Adding a stage"), file 2 of 3: children per component in the
// spanning forest. Twin: forest_children_numpy in forest_children.py.
extern "C" __global__ void toy_forest_children(const long long *parent, unsigned long long *out, long long C) {
    long long v = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (v < C && parent[v] >= 0) atomicAdd(&out[parent[v]], 1ULL);
}
