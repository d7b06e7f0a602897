#!/usr/bin/env python3
"""How the dispatch order of the Hopper attention kernels' CTAs sets their makespan (issue 31).

The GPU starts CTAs in blockIdx order (x fastest) as SMs free up, one CTA per SM here (the kernels
fill the shared memory). Under a causal mask the CTAs' work differs: the forward's query block qb of
128 rows sees qb + 1 key blocks, the backward's key block kb of 128 keys sees (S/64 - 2 kb) query
blocks of 64 rows per query head of its group. This greedy list-scheduling model (every pair or key
block the same cost, no prologue) gives the makespan over the mean load per SM, for the order the
kernels had (the blocks of one head after another) and the one they have now (the heaviest blocks of
all heads first: x walks the heads). It models the dispatch, not the kernels' speed.
  python3 tools/cta_order_model.py        (a second)
"""
import heapq

SMS = 132  # H100 SXM


def makespan(works, sms=SMS):
    free = [0.0] * sms
    for w in works:
        t = heapq.heappop(free)
        heapq.heappush(free, t + w)
    return max(free)


def ratio(works):
    return makespan(works) / (sum(works) / SMS)


def forward(S, H, doc, heads_inside):
    n = S // 128
    work = [(qb % (doc // 128)) + 1 for qb in reversed(range(n))]  # heaviest first within a document
    if heads_inside:
        return [w for w in work for _ in range(H)]
    return [w for _ in range(H) for w in work]


def backward(S, Hkv, group, doc, heads_inside):
    n = S // 128
    work = [(doc // 64 - 2 * (kb % (doc // 128))) * group for kb in range(n)]
    if heads_inside:
        return [w for w in work for _ in range(Hkv)]
    return [w for _ in range(Hkv) for w in work]


def main():
    print("makespan / mean load, 132 SMs, 32 query / 8 kv heads: head-major order -> heaviest first across heads")
    for S, doc in ((4096, 4096), (32768, 32768), (131072, 131072), (32768, 4096)):
        name = f"S {S}" + (f", documents of {doc}" if doc != S else "")
        f = [ratio(forward(S, 32, doc, h)) for h in (False, True)]
        b = [ratio(backward(S, 8, 4, doc, h)) for h in (False, True)]
        print(f"  {name:28s} forward {f[0]:.3f} -> {f[1]:.3f}   backward {b[0]:.3f} -> {b[1]:.3f}")
        assert f[1] <= f[0] + 1e-9 and b[1] <= b[0] + 1e-9, "the new order should never be worse here"


if __name__ == "__main__":
    main()
