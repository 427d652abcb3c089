/* weft: searching sorted arrays. One binary search over ascending uint64
 * keys, for every module that keeps a sorted list of ids (prep's document
 * ids while it clusters near duplicates, `weft eval --watch`'s sets of
 * evaluated checkpoints, a dataset's shard offsets), so that none writes
 * its own loop and its own off-by-one. Sorting is qsort's job; this only searches. */
#ifndef WEFT_SORTED_H
#define WEFT_SORTED_H

#include <stddef.h>
#include <stdint.h>

/* The index of the first element of a[0, n) (ascending; equal keys may
 * repeat) that is >= key: the index of key's first copy when it is there,
 * else where it would be inserted; n when every element is smaller (and 0
 * for an empty array, where `a` may be NULL). */
size_t wf_sorted_u64_lower_bound(const uint64_t *a, size_t n, uint64_t key);

/* The index of the first element of a[0, n) (ascending) that is > key:
 * one past key's last copy when it is there; n when no element is larger.
 * upper_bound - 1 is the last element <= key (a prefix-sum table's slot of
 * a position, where empty slots repeat a value). */
size_t wf_sorted_u64_upper_bound(const uint64_t *a, size_t n, uint64_t key);

/* Whether key is in a[0, n) (ascending). */
int wf_sorted_u64_contains(const uint64_t *a, size_t n, uint64_t key);

#endif
