/* Binary search over sorted uint64 arrays (include/weft/sorted.h). */
#include "weft/sorted.h"

size_t wf_sorted_u64_lower_bound(const uint64_t *a, size_t n, uint64_t key) {
    /* Invariant: a[i] < key for i < lo, a[i] >= key for i >= hi. */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

size_t wf_sorted_u64_upper_bound(const uint64_t *a, size_t n, uint64_t key) {
    /* Invariant: a[i] <= key for i < lo, a[i] > key for i >= hi. */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

int wf_sorted_u64_contains(const uint64_t *a, size_t n, uint64_t key) {
    size_t i = wf_sorted_u64_lower_bound(a, n, key);
    return i < n && a[i] == key;
}
