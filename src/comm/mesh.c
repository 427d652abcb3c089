/* The device mesh (weft/comm.h): the world's ranks as a grid with named
 * axes, outermost first, and one sub-communicator per axis.
 *
 * A rank's coordinates are the digits of its world rank in the mixed
 * radix of the axis sizes (the last axis varies fastest), so a group of
 * the innermost axis is consecutive ranks. The communicator of axis a
 * holds the ranks whose other coordinates equal this rank's: its color is
 * the rank with coordinate a set to 0, its key the coordinate on a, so
 * its ranks are ordered by that coordinate.
 *
 * This file does not decide which axes exist or what runs on them: the
 * trainer does (dist.tp, dist.pp; docs/distributed.md, "The device mesh").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft/comm.h"

struct wf_mesh {
    int n;
    char names[WF_MESH_MAX_AXES][16];
    int sizes[WF_MESH_MAX_AXES];
    int coords[WF_MESH_MAX_AXES];
    wf_comm *comms[WF_MESH_MAX_AXES];
};

static int axis_index(const wf_mesh *m, const char *name) {
    for (int a = 0; m && name && a < m->n; a++)
        if (strcmp(m->names[a], name) == 0) return a;
    return -1;
}

wf_status wf_mesh_create(wf_comm *world, int n_axes, const char *const *names, const int *sizes, wf_mesh **out) {
    *out = NULL;
    if (n_axes < 1 || n_axes > WF_MESH_MAX_AXES)
        return wf_error(WF_ERR_INVALID, "dist: a mesh of %d axes: use 1 .. %d", n_axes, WF_MESH_MAX_AXES);
    wf_mesh *m = calloc(1, sizeof *m);
    if (!m) return wf_error(WF_ERR_NOMEM, "dist: out of memory for the mesh");
    m->n = n_axes;
    long long product = 1;
    char shape[160] = "";
    size_t len = 0;
    for (int a = 0; a < n_axes; a++) {
        if (!names[a] || !*names[a] || strlen(names[a]) >= sizeof m->names[a] || axis_index(m, names[a]) >= 0) {
            free(m);
            return wf_error(WF_ERR_INVALID, "dist: mesh axis %d's name \"%s\" is empty, too long or repeated", a,
                            names[a] ? names[a] : "");
        }
        snprintf(m->names[a], sizeof m->names[a], "%s", names[a]);
        m->sizes[a] = sizes[a];
        if (len < sizeof shape)
            len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%s %d", a ? " x " : "", names[a], sizes[a]);
        if (sizes[a] >= 1) product *= sizes[a];
    }
    int world_size = wf_comm_size(world);
    for (int a = 0; a < n_axes; a++)
        if (sizes[a] < 1) {
            free(m);
            return wf_error(WF_ERR_CONFIG, "dist: the mesh %s has an axis of size %d", shape, sizes[a]);
        }
    if (product != world_size) {
        free(m);
        return wf_error(WF_ERR_CONFIG, "dist: the mesh %s needs %lld ranks, the job has %d", shape, product,
                        world_size);
    }
    /* coordinates: the mixed-radix digits of the world rank */
    int r = wf_comm_rank(world);
    for (int a = n_axes - 1; a >= 0; a--) {
        m->coords[a] = r % m->sizes[a];
        r /= m->sizes[a];
    }
    for (int a = 0; a < n_axes; a++) {
        int c[WF_MESH_MAX_AXES];
        memcpy(c, m->coords, sizeof c);
        c[a] = 0;
        int color = wf_mesh_rank_at(m, c);
        wf_status s = wf_comm_split(world, color, m->coords[a], m->names[a], &m->comms[a]);
        if (s != WF_OK) {
            wf_mesh_destroy(m);
            return s;
        }
    }
    *out = m;
    return WF_OK;
}

void wf_mesh_destroy(wf_mesh *m) {
    if (!m) return;
    for (int a = m->n - 1; a >= 0; a--) wf_comm_destroy(m->comms[a]);
    free(m);
}

wf_comm *wf_mesh_comm(const wf_mesh *m, const char *name) {
    int a = axis_index(m, name);
    return a < 0 ? NULL : m->comms[a];
}

int wf_mesh_size(const wf_mesh *m, const char *name) {
    int a = axis_index(m, name);
    return a < 0 ? 0 : m->sizes[a];
}

int wf_mesh_coord(const wf_mesh *m, const char *name) {
    int a = axis_index(m, name);
    return a < 0 ? -1 : m->coords[a];
}

int wf_mesh_rank_at(const wf_mesh *m, const int *coords) {
    int r = 0;
    for (int a = 0; a < m->n; a++) {
        if (coords[a] < 0 || coords[a] >= m->sizes[a]) return -1;
        r = r * m->sizes[a] + coords[a];
    }
    return r;
}
