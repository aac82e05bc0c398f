// Shared device helpers. Twin of distgrail/hashing.py: dg_hash must match hash3 bit for bit.
// Every DG_* constant comes from distgrail/constants.py, in the #define block that
// distgrail.gpu.kernels.defines_header generates and prepends to every kernel source.
#pragma once
#if !defined(DG_CONSTANTS_GENERATED)
#error "DG_* constants missing: compile distgrail.gpu.kernels.module_source(name) (the generated #define block, then the file)"
#endif
typedef unsigned long long u64;
typedef long long i64;

__device__ __forceinline__ u64 dg_mix(u64 z) {
    z ^= z >> 30; z *= DG_MIX1;
    z ^= z >> 27; z *= DG_MIX2;
    return z ^ (z >> 31);
}

// base = dg_mix(seed * GOLDEN + stream * S2), computed once on the host side of the call
__device__ __forceinline__ u64 dg_hash(u64 base, u64 key) {
    return dg_mix(((key + 1ULL) * DG_GOLDEN) ^ base);
}

// Hub rows (kernels/condense.cu, kernels/forest.cu) are swept by teams of DG_HUB_TEAM warps: the
// listed rows go round-robin over the teams, and fewer rows than teams split the grid's warps
// evenly between them (one row: the whole grid). Every warp walking every listed row cost each
// warp the whole list (R-MAT 27's whole graph lists 39,067 rows of more than 4096 entries).
// Warps past teams * size take no row. Twin: distgrail.gpu.sweep.hub_team. A team's size does not
// follow its row's length: one giant row among more rows than teams is one team's alone
// (docs/design.md, the paragraph on hub rows of phase 5 and the condensation).
struct DgHubTeam {
    i64 teams, size, team, warp;  // teams, warps per team, this warp's team and its place in it
};
__device__ __forceinline__ DgHubTeam dg_hub_team(i64 nhubs, i64 wid, i64 nwarps) {
    const i64 most = nwarps / DG_HUB_TEAM > 1 ? nwarps / DG_HUB_TEAM : 1;
    const i64 teams = nhubs < 1 ? 1 : (nhubs < most ? nhubs : most);
    const i64 size = nwarps / teams;
    const i64 team = wid / size;
    return {teams, size, team, wid - team * size};
}

// the hub rows h (of hubs 0..nhubs) that this warp's team sweeps; declares `tm` (its team: a row's
// entries then go b = first + tm.warp * 32 .. by tm.size * 32, one warp's lanes on 32 of them)
#define DG_TEAM_HUB_ROWS(nhubs, h)                                                                \
    const DgHubTeam tm = dg_hub_team((nhubs), ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5,  \
                                     ((i64)gridDim.x * blockDim.x) >> 5);                         \
    for (i64 h = tm.team < tm.teams ? tm.team : (nhubs); h < (nhubs); h += tm.teams)
