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


def snake_makespan(works, sms=SMS, per_block=0.0):
    """Forward variant 4 (persistent): one CTA per SM takes blocks rG + b, rG + G - 1 - b in
    alternate rounds of the heaviest-first list (no hardware dispatch); per_block: what each block
    still costs outside its key blocks."""
    loads = [0.0] * sms
    for k, w in enumerate(works):
        r, i = divmod(k, sms)
        loads[sms - 1 - i if r % 2 else i] += w + per_block
    return max(loads)


def main():
    print("makespan / mean load, 132 SMs, 32 query / 8 kv heads: head-major order -> heaviest first across heads")
    for S, doc in ((4096, 4096), (32768, 32768), (131072, 131072), (32768, 4096)):
        name = f"S {S}" + (f", documents of {doc}" if doc != S else "")
        f = [ratio(forward(S, 32, doc, h)) for h in (False, True)]
        b = [ratio(backward(S, 8, 4, doc, h)) for h in (False, True)]
        print(f"  {name:28s} forward {f[0]:.3f} -> {f[1]:.3f}   backward {b[0]:.3f} -> {b[1]:.3f}")
        assert f[1] <= f[0] + 1e-9 and b[1] <= b[0] + 1e-9, "the new order should never be worse here"
    # Variant 4 of the forward against variant 3 when each block also pays 1.7 key blocks' time around
    # its loop (the estimate from the 4K and 32K document rates, docs/attention.md) and variant 4 only 0.2.
    print("forward, each block + 1.7 key blocks (variant 3, dispatched) / + 0.2 (variant 4, snake), over the work")
    for S, doc in ((4096, 4096), (32768, 4096), (32768, 32768)):
        w = forward(S, 32, doc, True)
        v3 = [0.0] * SMS
        for x in w:
            heapq.heappush(v3, heapq.heappop(v3) + x + 1.7)
        mean = sum(w) / SMS
        sn = snake_makespan(w, per_block=0.2)
        print(f"  S {S}, documents of {doc}: {max(v3) / mean:.3f} -> {sn / mean:.3f}")
        assert sn < max(v3), "the persistent walk should win under these costs"


if __name__ == "__main__":
    main()
