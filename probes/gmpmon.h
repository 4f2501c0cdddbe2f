/* gmpmon.h — shared definitions for gmpmon's BPF programs.
 *
 * The event record must match gmpmon/events.py RECORD ("<QIiIIQQQ", 48 bytes):
 * the Python side decodes ring-buffer spans of these in bulk with struct.iter_unpack.
 */
#ifndef GMPMON_H
#define GMPMON_H

struct gm_event {
    u64 ts;     /* bpf_ktime_get_ns() */
    u32 kind;   /* gmpmon.events.Kind */
    s32 p;      /* P id, -1 = none */
    u32 m;      /* OS thread id of the M, 0 = none */
    u32 pad;
    u64 g;      /* goid, 0 = none */
    u64 a0;
    u64 a1;
};

#endif /* GMPMON_H */
