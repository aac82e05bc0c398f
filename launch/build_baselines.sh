#!/usr/bin/env bash
# Build the CPU reachability indexes distgrail is measured against (python -m
# distgrail.benchmarks.baselines) from their authors' sources, which are not shipped here:
#
#   git clone https://github.com/o-reach/O-Reach   # O'Reach, SEA 2021 (MIT licence)
#   git clone https://github.com/zakimjz/grail     # the original GRAIL, VLDB 2010
#   bash launch/build_baselines.sh O-Reach grail OUT   # -> OUT/oreach, OUT/grail
#
# Either source directory may be "-" (not built). Both are compiled with their own release flags
# (-O3; O'Reach's CMake Release adds -DNDEBUG) by $CXX (default g++; O'Reach's argument parser, in
# C, by $CC, default gcc), <cstdint> included first (GCC 13 no longer includes it through other
# headers, which O'Reach relies on). O'Reach includes boost/circular_buffer.hpp and nothing else
# of Boost; where Boost's headers are not installed, OUT/include/boost/circular_buffer.hpp is
# written: a ring buffer with the part of that interface O'Reach uses (a capacity given at
# construction, push_back, pop_front, front, empty, size, clear).
# `build_baselines.sh --shim OUT` writes only that header (the test suite checks it).
set -euo pipefail

usage() { echo "usage: bash launch/build_baselines.sh OREACH_SRC|- GRAIL_SRC|- OUT  (or --shim OUT)" >&2; exit 2; }
CXX=${CXX:-g++} CC=${CC:-gcc}

write_shim() {
    mkdir -p "$1/boost"
    cat > "$1/boost/circular_buffer.hpp" <<'EOF'
// Written by distgrail's launch/build_baselines.sh where Boost is not installed: a ring buffer
// with the part of boost::circular_buffer's interface O'Reach uses. Pushing into a full buffer
// overwrites the oldest element, as Boost's does.
#pragma once
#include <cstddef>
#include <vector>

namespace boost {
template <class T> class circular_buffer {
public:
    explicit circular_buffer(std::size_t capacity = 0) : data_(capacity ? capacity : 1), cap_(capacity) {}
    void push_back(const T &x) {
        if (cap_ == 0) return;
        if (count_ == cap_) { head_ = next(head_); --count_; }
        std::size_t at = head_ + count_;
        data_[at >= cap_ ? at - cap_ : at] = x;
        ++count_;
    }
    void pop_front() { head_ = next(head_); --count_; }
    T &front() { return data_[head_]; }
    const T &front() const { return data_[head_]; }
    bool empty() const { return count_ == 0; }
    bool full() const { return count_ == cap_; }
    std::size_t size() const { return count_; }
    std::size_t capacity() const { return cap_; }
    void clear() { head_ = 0; count_ = 0; }
private:
    std::size_t next(std::size_t i) const { return i + 1 == cap_ ? 0 : i + 1; }
    std::vector<T> data_;
    std::size_t cap_, head_ = 0, count_ = 0;
};
}  // namespace boost
EOF
}

if [[ ${1:-} == --shim ]]; then
    [[ $# -eq 2 ]] || usage
    write_shim "$2/include"
    exit 0
fi
[[ $# -eq 3 ]] || usage
OREACH=$1 GRAIL=$2 OUT=$3
mkdir -p "$OUT"

if [[ $OREACH != - ]]; then
    [[ -f $OREACH/app/reachability.cpp ]] || { echo "$OREACH: not O'Reach's source (no app/reachability.cpp)" >&2; exit 2; }
    inc=()
    if ! echo '#include <boost/circular_buffer.hpp>' | $CXX -x c++ -fsyntax-only - 2>/dev/null; then
        write_shim "$OUT/include"
        inc=(-I"$OUT/include")
        echo "Boost not found: O'Reach built with $OUT/include/boost/circular_buffer.hpp"
    fi
    o=$OREACH
    rm -f "$OUT/oreach"  # (a failed build leaves no earlier program to be run by mistake)
    $CC -O3 -w -I"$o/extern/argtable3-3.0.3" -c "$o/extern/argtable3-3.0.3/argtable3.c" -o "$OUT/argtable3.o"  # (C: its argument parser)
    $CXX -std=c++14 -O3 -DNDEBUG -fopenmp -w -include cstdint "${inc[@]}" -I"$o" -I"$o/app" -I"$o/extern/argtable3-3.0.3" \
        -I"$o/extern/flat_hash_map" -I"$o/lib" -I"$o/extern/KaHIP/lib" -I"$o/extern/KaHIP/lib/io" \
        -I"$o/extern/KaHIP/lib/tools" \
        "$o/app/reachability.cpp" "$o/extern/KaHIP/lib/algorithms/strongly_connected_components.cpp" \
        "$o/extern/KaHIP/lib/io/graph_io.cpp" "$o/extern/KaHIP/lib/tools/random_functions.cpp" \
        "$o/lib/algorithms/topological_sort.cpp" "$o/extern/murmur_hash/MurmurHash3.cpp" \
        "$o/lib/algorithms/bfs.cpp" "$o/lib/reachability/oreach.cpp" "$OUT/argtable3.o" -o "$OUT/oreach"
    echo "built $OUT/oreach"
fi

if [[ $GRAIL != - ]]; then
    [[ -f $GRAIL/Grail.cpp ]] || { echo "$GRAIL: not GRAIL's source (no Grail.cpp)" >&2; exit 2; }
    g=$GRAIL
    rm -f "$OUT/grail"
    $CXX -O3 -w -Wno-deprecated -include cstdint "$g/main.cpp" "$g/Graph.cpp" "$g/GraphUtil.cpp" "$g/Grail.cpp" \
        "$g/TCSEstimator.cpp" "$g/interval_tree.c" -o "$OUT/grail"
    echo "built $OUT/grail"
fi
