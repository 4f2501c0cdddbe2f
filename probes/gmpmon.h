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

/* gmpmon.events.Kind (its 1-31 "probe" range) — tests/unit/test_probetable.py checks these
 * against events.py and the kinds each handler emits against gmpmon/probetable.py. */
#define GM_EXECUTE        1
#define GM_FIND_RUNNABLE  2
#define GM_PARK           3
#define GM_READY          4
#define GM_GO_CREATE      5
#define GM_GO_EXIT        6
#define GM_SYSCALL_ENTER  7
#define GM_SYSCALL_EXIT   8
#define GM_HANDOFF        9
#define GM_PREEMPT_REQ   10
#define GM_PREEMPTED     11
#define GM_STW_START     12
#define GM_STW_END       13
#define GM_STEAL         14
#define GM_MUTEX         15
#define GM_MUTEX_ADDR    16
#define GM_P_IDLE        17
/* and, from the "other" range (90-99): */
#define GM_WAKE          90
/* and the in-band LOST mark gm_emit_at writes after a loss: a0 = records this CPU lost
 * just before it, a1 = LOST_IN_BAND (gmpmon.events.LOST_IN_BAND) */
#define GM_LOST          35
#define LOST_IN_BAND     1

/* gmpmon.events.Counter — the in-kernel aggregate tables. */
#define GM_C_SCHED_LAT      1
#define GM_C_STEAL_ATTEMPT  2
#define GM_C_STEAL_OK       3
#define GM_C_STEAL_GS       4
#define GM_C_PARK_COUNT     5
#define GM_C_PARK_WAIT_NS   6
#define GM_C_PROBE_HITS     7   /* filled by user space from the `hits` array */
#define GM_C_RING           8   /* filled by user space from `emits`, `lost`, `ctr_full` and its reader */
/* Every total the model shows, counted where the handler emits its record, so that a record
 * the ring refused or the reader thinned never changes a total (gmpmon/model/counts.py). */
#define GM_C_GO_START       9   /* p = P of the execute; key 0 */
#define GM_C_GO_CREATE     20   /* p = NO_P; key 0 */
#define GM_C_GO_EXIT       21   /* p = NO_P; key 0 */
#define GM_C_SYS_ENTER     22   /* p = P; key 1 entersyscallblock, 0 entersyscall */
#define GM_C_SYS_EXIT      23   /* p = P held at exitsyscall (NO_P: none) */
#define GM_C_HANDOFF       24   /* p = the P handed off; key 0 */
#define GM_C_YIELD         25   /* p = NO_P; key = GM_YIELD_* */
#define GM_C_PREEMPT_REQ   26   /* p = NO_P; key 0 */
#define GM_C_STW           27   /* p = NO_P; key = stw reason: pauses */
#define GM_C_STW_NS        28   /* p = NO_P; key = stw reason: ns, stop entry -> restarted */

/* GM_C_YIELD keys: how a G gave up its P and stayed runnable (gmpmon.events.YIELD_*). */
#define GM_YIELD_GOSCHED   0   /* runtime.Gosched (gosched_m, goschedImpl BL=0) */
#define GM_YIELD_PREEMPT   1   /* a preemption (goschedImpl BL=1, gopreempt_m) */
#define GM_YIELD_HANDOFF   2   /* goyield_m: semrelease handed the semaphore on */

/* gmpmon.events.LockKind */
#define GM_LOCK_MUTEX 1
#define GM_LOCK_RWMUTEX_R 2
#define GM_LOCK_RWMUTEX_W 3
#define GM_LOCK_SEMA 4

/* Key of the generic counter hash (see gm_count in gmpmon.bpf.c); decoded by
 * gmpmon/capture/bpfprog.py:decode_counter_key. */
#define GM_COUNTER_KEY(table, p, key) \
    (((u64)(table) << 56) | ((u64)(((u32)((p) + 1)) & 0xffffff) << 32) | (u64)(u32)(key))

/* Scheduling-latency bucket, identical to gmpmon.events.lat_bucket: log2 with 4 linear
 * sub-buckets per power of two. BPF has no clz instruction: binary search for the top bit. */
#define GM_LAT_SUB 4
static __always_inline u32 gm_log2(u64 v)
{
    u32 r = 0;
    if (v >> 32) { v >>= 32; r += 32; }
    if (v >> 16) { v >>= 16; r += 16; }
    if (v >> 8)  { v >>= 8;  r += 8; }
    if (v >> 4)  { v >>= 4;  r += 4; }
    if (v >> 2)  { v >>= 2;  r += 2; }
    if (v >> 1)  { r += 1; }
    return r;
}

static __always_inline u32 gm_lat_bucket(u64 ns)
{
    if (ns < GM_LAT_SUB)
        return (u32)ns;
    u32 hb = gm_log2(ns);
    u32 sub = (u32)(ns >> (hb - 2)) & (GM_LAT_SUB - 1);
    return hb * GM_LAT_SUB + sub;
}

/* An exit site's condition (gmpmon/binary/exits.py), in the high half of its attach cookie:
 * 0 = always; else bit 4 set and the low nibble the x86 condition code of the jcc the probe
 * sits on (taken: the jump's own cc; its fall-through: the cc with bit 0 flipped). `flags` is
 * the user's RFLAGS in the trap's registers, as the jump is about to test them. cc >> 1 picks
 * the test, cc & 1 negates it (Intel SDM Vol. 2, Jcc/SETcc: O, B, E, BE, S, P, L, LE).
 * tests/unit/test_probetable.py checks it against the CPU's own SETcc. */
static __always_inline int gm_cond(u64 flags, u64 c)
{
    if (!(c & 0x10))
        return 1;
    u64 cf = flags & 1, pf = (flags >> 2) & 1, zf = (flags >> 6) & 1;
    u64 sf = (flags >> 7) & 1, of = (flags >> 11) & 1;
    u64 r;
    switch ((c >> 1) & 7) {
    case 0: r = of; break;
    case 1: r = cf; break;
    case 2: r = zf; break;
    case 3: r = cf | zf; break;
    case 4: r = sf; break;
    case 5: r = pf; break;
    case 6: r = sf ^ of; break;
    default: r = zf | (sf ^ of); break;
    }
    return (int)(r ^ (c & 1));
}

#endif /* GMPMON_H */
