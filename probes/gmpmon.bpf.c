/* gmpmon.bpf.c — uprobes on the Go runtime scheduler (linux/amd64, Go 1.19–1.27).
 *
 * Compiled by BCC with everything version-specific passed as -D flags by
 * gmpmon/capture/bpfprog.py (struct offsets from BinaryInfo.offsets, addresses, switches):
 *
 *   (TGID, the target process, is the tgid_cfg map: every program returns at once for other tasks)
 *                     (probes are attached per inode, pid=-1, so `gmpmon run` can place them
 *                     before exec; other processes running the same binary are ignored).
 *   G_M G_GOID G_WAITREASON                 runtime.g fields (go-runtime.md §2.1)
 *   G_STARTPC G_GOPC  runtime.g.startpc / gopc (the goroutine's function and the pc after
 *                     its `go` statement's call), 0 when the binary gives no offset for them.
 *   M_PROCID M_CURG M_P                     runtime.m fields
 *   P_ID P_M P_RUNQHEAD P_RUNQTAIL P_RUNNEXT runtime.p fields
 *   HAVE_RUNQSIZE     1 when sched.runqsize (<=1.24) / sched.runq.size (1.25+) can be read:
 *                     its runtime address is in runq_addr[0], set by user space (for a PIE
 *                     started by `gmpmon run` it is known only after exec). 0 for stripped
 *                     binaries (no runtime.sched symbol).
 *   STW_HAS_REASON    1 when stopTheWorldWithSema(reason stwReason) has AL=reason (1.21+).
 *   LOCK_RA_OFF       where lockSlow's return address is relative to RSP at its probe site:
 *                     0 at `push rbp` (1.21+ prologues); the frame size when the site is
 *                     past `sub rsp, N` (1.19's prologue has no push: sub/mov/lea rbp).
 *   SEMA_RA_OFF       the same for semacquire1's probe site.
 *   SEMA_HAS_REASON   1 when semacquire1 has its 5th argument `reason waitReason` (SIL, 1.21+).
 *   WR_SYNC_MUTEX WR_RWMUTEX_R WR_RWMUTEX_W  this binary's waitReason values for
 *                     "sync.Mutex.Lock", "sync.RWMutex.RLock", "sync.RWMutex.Lock" (256 =
 *                     absent: never equal to a u8 reason).
 *
 * ABIInternal (go-runtime.md §1): arguments in RAX, RBX, RCX, RDI, RSI, ...; R14 = current g.
 * Every probe sits on an emulated instruction (push rbp / jcc / call) after the stack check,
 * where the argument registers are still intact. Scheduler functions run on g0, where
 * R14 = m.g0, so m = [R14 + G_M] and the user goroutine is m.curg.
 *
 * Per-event records go to the `events` ring buffer with BPF_RB_NO_WAKEUP (user space polls
 * it by mmap); a full buffer drops the record and counts it in `lost`. Counts and histograms
 * live in `counters` and are read periodically by user space as deltas.
 */
#include <uapi/linux/ptrace.h>
#include "gmpmon.h"

#define NO_P (-1)

BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);
/* lost: records the ring buffer refused (full); ctr_full: counter updates the full
 * `counters` hash refused. Both are reported as lost (LOST). */
BPF_PERCPU_ARRAY(lost, u64, 1);
BPF_PERCPU_ARRAY(ctr_full, u64, 1);
/* emits: records the probes tried to write. The ledger user space checks (Counter.RING):
 * emits = records read + records cut unread at the end + lost. */
BPF_PERCPU_ARRAY(emits, u64, 1);
/* Losses this CPU has not yet marked in the ring: the next record that fits is preceded by
 * a LOST record (a0 = how many, ts = when the first was refused), so the mark sits in the
 * stream where the gap is. `marks` counts the LOST records written. */
struct gm_lost {
    u64 n;
    u64 first_ts;
};
BPF_PERCPU_ARRAY(lost_pending, struct gm_lost, 1);
BPF_PERCPU_ARRAY(marks, u64, 1);
/* Probe hit counts per handler id (gmpmon/probetable.py: Probe.hid): overhead
 * accounting for the benchmark (hits x emulated-hit cost = the floor). */
BPF_PERCPU_ARRAY(hits, u64, 32);
/* Generic aggregate: key = GM_COUNTER_KEY(table, p, key), value = running total. */
BPF_HASH(counters, u64, u64, COUNTERS_MAX);
/* cfg[0] = window generation: bumped by user space whenever the hot probes are attached
 * again (default mode's duty cycle), so that a timestamp left by the previous window is never
 * paired with an event of this one (the events in between were not seen).
 * cfg[1] = 1 while default mode's hot probes are detached (set by gmpmon/capture/hotctl.py
 * at WINDOW 0, cleared before the next link): the counts of the kinds the model keeps only
 * inside windows (HOT_KINDS: the hot handlers', and the cold entersyscallblock's and
 * gopreempt_m's) stop, so that a total covers the windows only, whole. Without it the hot
 * handlers' counts ran on while the link was closed (~30 ms a window): 3% more syscalls
 * than the windows' records on busyhttp.
 * cfg[2] = the cold sync.Mutex probes' sampling period, set by the budget's governor
 * (gmpmon/capture/coldgov.py): 1 in cfg[2] contentions is traced (0 and 1: every one). An
 * untraced one costs its traps and this test only: no user-stack walk (~2 µs), no map update,
 * no record; its lockSlow entry is still counted in `hits`.
 * cfg[3] = the sync.Mutex sites' link generation: bumped by the governor each time it links
 * them again after a pause (it duty-cycles them where their traps alone pass its share), so
 * that a lockSlow entered before the pause is never paired with an exit after it. */
BPF_ARRAY(cfg, u32, 4);
/* runq_addr[0] = runtime address of the global runq length (an int32), 0 = unknown. */
BPF_ARRAY(runq_addr, u64, 1);

struct gm_stamp {
    u64 ts;
    u32 gen;
    u32 reason;
};
/* goid -> when it became runnable (ready / preempted / created): sched latency at execute.
 * LRU: an entry whose goroutine is never seen again ages out. BPF_F_NO_COMMON_LRU (per-CPU
 * LRU lists) avoids one global lock taken on every hot hit. */
BPF_F_TABLE("lru_hash", u64, struct gm_stamp, runnable_at, 65536, BPF_F_NO_COMMON_LRU);
/* goid -> when and why it parked: park->ready wait per reason. */
BPF_F_TABLE("lru_hash", u64, struct gm_stamp, parked_at, 65536, BPF_F_NO_COMMON_LRU);

/* Steal in flight on this M (keyed by TID: runqsteal runs on g0 and does not migrate). */
struct gm_steal { s32 thief; s32 victim; };
BPF_HASH(steal_try, u32, struct gm_steal, 1024);

/* STW in progress: one at a time (the world is stopped by one M). */
BPF_ARRAY(stw_at, struct gm_stamp, 1);

/* P id -> goid that entered a syscall last on it, to name the G whose P is handed off. An
 * array (P ids are dense, < GM_MAX_P): a store per syscall instead of a hash update. */
#define GM_MAX_P 1024
BPF_ARRAY(sys_g, u64, GM_MAX_P);

/* Contended sync.Mutex: goid -> slow-path entry (keyed by goid: the G may resume on
 * another M after parking in the semaphore). */
struct gm_lock {
    u64 ts;
    u64 addr;
    u64 stack;   /* (caller pc << 16) | (stack id & 0xffff) */
    u64 every;   /* the sampling period it was traced under (cfg[2]; 1: every contention) */
    u64 gen;     /* cfg[3] at the entry */
};

static __always_inline u32 gm_lock_gen(void)
{
    int three = 3;
    u32 *g = cfg.lookup(&three);
    return g ? *g : 0;
}
/* Where the governor pauses the sync.Mutex sites, an entry whose exit fell in the pause
 * stays until its G contends again (its gen tells it apart). Not an LRU: on Prometheus its
 * common LRU list took a run that traces nothing from ~0.8 to ~2 µs. */
BPF_HASH(lock_at, u64, struct gm_lock, 65536);

/* semacquire1 in progress, per goid: like lock_at, plus the LockKind decided at entry. */
struct gm_sema {
    u64 ts;
    u64 addr;
    u64 stack;   /* (caller pc << 16) | (stack id & 0xffff) */
    u64 kind;    /* GM_LOCK_* */
    u64 gen;     /* duty-cycle window of the entry: semacquire1 is a hot probe (see on_sema_exit) */
};
BPF_HASH(sema_at, u64, struct gm_sema, 65536);

/* Finished lock/semaphore waits, summed in the kernel: (lock address, stack word, GM_LOCK_*)
 * -> how many and their total wait. User space reads the deltas with the counters (one
 * MUTEX_ROWS event per row that grew) instead of a MUTEX_ADDR + MUTEX pair per wait: on
 * Prometheus under load those pairs were ~3/4 of all records, each worked through in Python.
 * A wait whose row does not fit (the hash full: WAIT_ROWS_MAX rows) goes to the ring as the
 * pair, as before: nothing is lost, only dearer. */
struct gm_wait_key {
    u64 addr;
    u64 stack;   /* (caller pc << 16) | (stack id & 0xffff) */
    u64 kind;    /* GM_LOCK_* */
};
struct gm_wait_row {
    u64 n;
    u64 ns;
};
BPF_HASH(wait_rows, struct gm_wait_key, struct gm_wait_row, WAIT_ROWS_MAX);
BPF_STACK_TRACE(stacks, 16384);
/* The target process, set by user space once loaded (gmpmon/capture/bpfobj.py): a map, not
 * a -D define, so one compiled object serves every process of a binary. Unset (0) it names
 * no process: the idle task's tgid 0 is never ours. The same text is in gmpmon.bpf.c and
 * kernel_common.bpf.c: BCC rewrites map accesses only in the main file, not in a header. */
BPF_ARRAY(tgid_cfg, u32, 1);

/* ---- helpers ------------------------------------------------------------------------ */

static __always_inline u32 gm_target(void)
{
    int z = 0;
    u32 *t = tgid_cfg.lookup(&z);
    return t && *t ? *t : 0xffffffff;
}
#define TGID gm_target()

static __always_inline int gm_mine(void)
{
    return (bpf_get_current_pid_tgid() >> 32) == TGID;
}

static __always_inline u32 gm_tid(void)
{
    return (u32)bpf_get_current_pid_tgid();
}

static __always_inline u64 rd64(u64 addr)
{
    u64 v = 0;
    if (addr)
        bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

static __always_inline u32 rd32(u64 addr)
{
    u32 v = 0;
    if (addr)
        bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

static __always_inline u8 rd8(u64 addr)
{
    u8 v = 0;
    if (addr)
        bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

static __always_inline void gm_hit(u32 probe)
{
    u64 *v = hits.lookup(&probe);
    if (v)
        *v += 1;   /* per-CPU slot: no atomic needed */
}

static __always_inline u32 gm_gen(void)
{
    int zero = 0;
    u32 *g = cfg.lookup(&zero);
    return g ? *g : 0;
}

static __always_inline void gm_count(u32 table, s32 p, u32 key, u64 delta)
{
    u64 k = GM_COUNTER_KEY(table, p, key);
    u64 zero = 0;
    u64 *v = counters.lookup_or_try_init(&k, &zero);
    if (v) {
        __sync_fetch_and_add(v, delta);
    } else {
        /* The counters hash is full (COUNTERS_MAX = 20480 keys: 64 Ps x 256 latency buckets
         * and the per-P totals): the update is lost, and counted as a lost record so that
         * it is never silent. */
        int zero_idx = 0;
        u64 *l = ctr_full.lookup(&zero_idx);
        if (l)
            *l += 1;
    }
}

/* gm_count of a kind the model counts only inside default mode's windows (see cfg[1]): every
 * hot handler's, and the cold ones' of HOT_KINDS. */
static __always_inline void gm_count_windowed(u32 table, s32 p, u32 key, u64 delta)
{
    int one = 1;
    u32 *off = cfg.lookup(&one);
    if (off && *off)
        return;
    gm_count(table, p, key, delta);
}

/* ts = 0: the timestamp is taken after the reservation, so that the ring buffer's order is
 * (nearly) the timestamp order and user space's reorder window can stay small. A handler that
 * also stamps a map (runnable_at, parked_at) passes the same `now`, so that the latencies and
 * waits computed from events and those the kernel aggregates are the same numbers (the map
 * updates in between took 2-4 us: the event-derived latencies were that much shorter). */
static __always_inline void gm_emit_at(u64 ts, u32 kind, s32 p, u32 m, u64 g, u64 a0, u64 a1)
{
    int zero_e = 0;
    u64 *n = emits.lookup(&zero_e);
    if (n)
        *n += 1;   /* per-CPU slot: no atomic needed */
    struct gm_lost *lp = lost_pending.lookup(&zero_e);
    if (lp && lp->n) {
        struct gm_event *mk = events.ringbuf_reserve(sizeof(struct gm_event));
        if (mk) {
            mk->ts = lp->first_ts;
            mk->kind = GM_LOST;
            mk->p = NO_P;
            mk->m = 0;
            mk->pad = 0;
            mk->g = 0;
            mk->a0 = lp->n;
            mk->a1 = LOST_IN_BAND;
            events.ringbuf_submit(mk, BPF_RB_NO_WAKEUP);
            lp->n = 0;
            u64 *k = marks.lookup(&zero_e);
            if (k)
                *k += 1;
        }
    }
    struct gm_event *e = events.ringbuf_reserve(sizeof(struct gm_event));
    if (!e) {
        int zero = 0;
        u64 *l = lost.lookup(&zero);
        if (l)
            *l += 1;
        if (lp) {
            if (!lp->n)
                lp->first_ts = bpf_ktime_get_ns();
            lp->n += 1;
        }
        return;
    }
    e->ts = ts ? ts : bpf_ktime_get_ns();
    e->kind = kind;
    e->p = p;
    e->m = m;
    e->pad = 0;
    e->g = g;
    e->a0 = a0;
    e->a1 = a1;
    events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

static __always_inline void gm_emit(u32 kind, s32 p, u32 m, u64 g, u64 a0, u64 a1)
{
    gm_emit_at(0, kind, p, m, g, a0, a1);
}

/* The M of the current thread, from the g in R14 (user g or g0: both have g.m). */
static __always_inline u64 gm_m(struct pt_regs *ctx)
{
    return rd64(ctx->r14 + G_M);
}

static __always_inline s32 gm_pid(u64 pp)
{
    return pp ? (s32)rd32(pp + P_ID) : NO_P;
}

/* Local runq length: runqtail - runqhead (+1 for runnext), as runqempty()/runqlen() do. */
static __always_inline u64 gm_runqlen(u64 pp)
{
    if (!pp)
        return 0;
    u32 head = rd32(pp + P_RUNQHEAD);
    u32 tail = rd32(pp + P_RUNQTAIL);
    u64 next = rd64(pp + P_RUNNEXT);
    return (u64)(u32)(tail - head) + (next != 0);
}

static __always_inline u64 gm_globrunq(void)
{
#if HAVE_RUNQSIZE
    int zero = 0;
    u64 *a = runq_addr.lookup(&zero);
    if (a && *a)
        return (u64)(s64)(s32)rd32(*a);
#endif
    return (u64)-1;
}

static __always_inline u64 gm_goid(u64 gp)
{
    return gp ? rd64(gp + G_GOID) : 0;
}

static __always_inline void gm_mark_runnable(u64 goid, u64 now)
{
    struct gm_stamp s = {.ts = now, .gen = gm_gen(), .reason = 0};
    runnable_at.update(&goid, &s);
}

/* ---- hot probes (full mode; duty-cycled windows in default mode) --------------------- */

/* runtime.execute(gp *g, inheritTime bool), all versions. On g0. RAX=gp (still _Grunnable),
 * BL=inheritTime. m.p is already acquired. Never returns. */
static __always_inline int on_execute(struct pt_regs *ctx)
{
    u64 now = bpf_ktime_get_ns();
    u64 goid = gm_goid(ctx->ax);
    u64 pp = rd64(gm_m(ctx) + M_P);
    s32 pid = gm_pid(pp);
    struct gm_stamp *r = runnable_at.lookup(&goid);
    if (r && r->ts) {
        if (r->gen == gm_gen() && now >= r->ts)
            gm_count_windowed(GM_C_SCHED_LAT, pid, gm_lat_bucket(now - r->ts), 1);
        r->ts = 0;  /* consumed: a plain store, cheaper than an LRU delete on every hit */
    }
    gm_count_windowed(GM_C_GO_START, pid, 0, 1);
    gm_emit_at(now, GM_EXECUTE, pid, gm_tid(), goid, ctx->bx & 0xff, gm_runqlen(pp));
    return 0;
}

/* runtime.findRunnable() (1.19+), entry. On g0 with a P (schedule() holds one): the M starts
 * looking for work. The search ends with the next EXECUTE on this M (its RETs are
 * single-stepped and hot: not probed). */
static __always_inline int on_findrunnable(struct pt_regs *ctx)
{
    u64 pp = rd64(gm_m(ctx) + M_P);
    gm_emit(GM_FIND_RUNNABLE, gm_pid(pp), gm_tid(), 0, gm_runqlen(pp), gm_globrunq());
    return 0;
}

/* runtime.gopark(unlockf, lock, reason waitReason, traceEv/traceReason, traceskip).
 * On the user g: R14=g, CL=reason (u8). The reason number is per version: user space
 * decodes it with BinaryInfo.wait_reasons. */
static __always_inline int on_gopark(struct pt_regs *ctx)
{
    u64 now = bpf_ktime_get_ns();
    u64 goid = gm_goid(ctx->r14);
    u32 reason = ctx->cx & 0xff;
    u64 pp = rd64(gm_m(ctx) + M_P);
    struct gm_stamp s = {.ts = now, .gen = gm_gen(), .reason = reason};
    parked_at.update(&goid, &s);
    gm_count_windowed(GM_C_PARK_COUNT, NO_P, reason, 1);
    gm_emit_at(now, GM_PARK, gm_pid(pp), gm_tid(), goid, reason, 0);
    return 0;
}

/* G `gp` becomes runnable at `now`: its park ends (PARK_WAIT_NS) and its runnable stamp is
 * set (SCHED_LAT at execute). The caller emits READY or WAKE with the same `now`. */
static __always_inline void gm_made_runnable(u64 goid, u64 now)
{
    u32 gen = gm_gen();
    struct gm_stamp *pk = parked_at.lookup(&goid);
    if (pk && pk->ts) {
        if (pk->gen == gen && now >= pk->ts)
            gm_count_windowed(GM_C_PARK_WAIT_NS, NO_P, pk->reason, now - pk->ts);
        pk->ts = 0;  /* consumed */
    }
    struct gm_stamp s = {.ts = now, .gen = gen, .reason = 0};
    runnable_at.update(&goid, &s);
}

/* runtime.ready(gp *g, traceskip int, next bool) (goready is inlined since 1.21). Usually on
 * g0 via systemstack: RAX=gp, still _Gwaiting with gp.waitreason set. The waker is m.curg
 * (0 when the scheduler, a timer or netpoll readies it from g0 after dropg). */
static __always_inline int on_ready(struct pt_regs *ctx)
{
    u64 now = bpf_ktime_get_ns();
    u64 gp = ctx->ax;
    u64 goid = gm_goid(gp);
    u32 wr = rd8(gp + G_WAITREASON);
    u64 m = gm_m(ctx);
    u64 waker = gm_goid(rd64(m + M_CURG));
    gm_made_runnable(goid, now);
    gm_emit_at(now, GM_READY, gm_pid(rd64(m + M_P)), gm_tid(), goid, waker, wr);
    return 0;
}

/* A `call runtime.casgstatus` in findRunnable, injectglist or findRunnableGCWorker: RAX=gp,
 * EBX=old, ECX=new status. Only _Gwaiting(4) -> _Grunnable(1) is a wake-up without ready
 * (netpoll, GC workers, the trace reader): the same stamps and fields as ready's. */
static __always_inline int on_wake(struct pt_regs *ctx)
{
    if ((u32)ctx->bx != 4 || (u32)ctx->cx != 1)
        return 0;
    u64 now = bpf_ktime_get_ns();
    u64 gp = ctx->ax;
    u64 goid = gm_goid(gp);
    u32 wr = rd8(gp + G_WAITREASON);
    gm_made_runnable(goid, now);
    gm_emit_at(now, GM_WAKE, gm_pid(rd64(gm_m(ctx) + M_P)), gm_tid(), goid, 0, wr);
    return 0;
}

static __always_inline int on_wake_sched(struct pt_regs *ctx)
{
    return on_wake(ctx);
}

static __always_inline int on_wake_inject(struct pt_regs *ctx)
{
    return on_wake(ctx);
}

static __always_inline int on_wake_gcworker(struct pt_regs *ctx)
{
    return on_wake(ctx);
}

/* The `call runtime.casgstatus` in exitsyscall0 (<= 1.25: _Gsyscall -> _Grunnable) or
 * exitsyscallNoP (1.26+: _Grunning -> _Grunnable): a G back from a syscall found no P and
 * becomes runnable (global runq, or an idle P at once). RAX=gp, EBX=old, ECX=new. WAKE with
 * a0 = 1 (from a syscall; the G's waitreason is stale: a1 = 0). */
static __always_inline int on_wake_sysexit(struct pt_regs *ctx)
{
    u32 old = (u32)ctx->bx;
    if ((u32)ctx->cx != 1 || (old != 2 && old != 3))
        return 0;
    u64 now = bpf_ktime_get_ns();
    u64 goid = gm_goid(ctx->ax);
    gm_mark_runnable(goid, now);
    gm_emit_at(now, GM_WAKE, NO_P, gm_tid(), goid, 1, 0);
    return 0;
}

/* Where a new goroutine comes from, read from newg in the same probe hit (two reads, no
 * trap of its own): newproc1 has set newg.startpc (its function) and newg.gopc (the pc after
 * the CALL in the `go` statement). Both lie in the binary's text, which is shorter than
 * 4 GiB, so their low 32 bits say which address they are: user space rebuilds them from the
 * text's start (capture.py: _fix_go_sites). a1 = low32(startpc) | low32(gopc) << 32. */
static __always_inline u64 gm_go_site(u64 newg)
{
#if G_STARTPC && G_GOPC
    if (!newg)
        return 0;
    u64 start = rd64(newg + G_STARTPC);
    u64 gopc = rd64(newg + G_GOPC);
    return (start & 0xffffffffULL) | (gopc << 32);
#else
    return 0;
#endif
}

/* The `CALL runtime.runqput` inside runtime.newproc.func1 (newproc's systemstack closure:
 * newg := newproc1(...); runqput(pp, newg, true)), all versions. CALL is emulated, so this is
 * the cheap way to see a creation with the new goid already set (newproc1's RET would be
 * single-stepped). RAX=pp, RBX=newg; on g0, the parent is m.curg. */
static __always_inline int on_gocreate(struct pt_regs *ctx)
{
    u64 now = bpf_ktime_get_ns();
    u64 goid = gm_goid(ctx->bx);
    u64 parent = gm_goid(rd64(gm_m(ctx) + M_CURG));
    gm_mark_runnable(goid, now);
    gm_count_windowed(GM_C_GO_CREATE, NO_P, 0, 1);
    gm_emit_at(now, GM_GO_CREATE, gm_pid(ctx->ax), gm_tid(), goid, parent,
               gm_go_site(ctx->bx));
    return 0;
}

/* Fallback for the above: a RET of runtime.newproc1 (single-stepped: ~25 us a creation).
 * RAX=newg; on g0, the parent is m.curg. */
static __always_inline int on_newproc1_ret(struct pt_regs *ctx)
{
    u64 now = bpf_ktime_get_ns();
    u64 goid = gm_goid(ctx->ax);
    u64 m = gm_m(ctx);
    u64 parent = gm_goid(rd64(m + M_CURG));
    gm_mark_runnable(goid, now);
    gm_count_windowed(GM_C_GO_CREATE, NO_P, 0, 1);
    gm_emit_at(now, GM_GO_CREATE, gm_pid(rd64(m + M_P)), gm_tid(), goid, parent,
               gm_go_site(ctx->ax));
    return 0;
}

/* runtime.goexit0(gp *g) (<=1.21) or runtime.gdestroy(gp *g) (1.22+). On g0, RAX=gp
 * (still _Grunning). */
static __always_inline int on_goexit(struct pt_regs *ctx)
{
    u64 goid = gm_goid(ctx->ax);
    runnable_at.delete(&goid);
    parked_at.delete(&goid);
    gm_count_windowed(GM_C_GO_EXIT, NO_P, 0, 1);
    gm_emit(GM_GO_EXIT, gm_pid(rd64(gm_m(ctx) + M_P)), gm_tid(), goid, 0, 0);
    return 0;
}

/* A syscall entry on the user g (R14): the G is remembered in sys_g under its P, for
 * on_handoffp when the P is taken from it. a0 = 1 when the syscall is known to block. */
static __always_inline int gm_syscall_enter(struct pt_regs *ctx, u64 blocking)
{
    u64 goid = gm_goid(ctx->r14);
    s32 pid = gm_pid(rd64(gm_m(ctx) + M_P));
    u64 *slot = sys_g.lookup(&pid);  /* NULL for NO_P or an id beyond the array */
    if (slot)
        *slot = goid;
    gm_count_windowed(GM_C_SYS_ENTER, pid, blocking ? 1 : 0, 1);  /* blocking: a cold site */
    gm_emit(GM_SYSCALL_ENTER, pid, gm_tid(), goid, blocking, 0);
    return 0;
}

/* runtime.entersyscall(), nosplit, on the user g (R14). m.p is still set at entry (<=1.25
 * reentersyscall clears it; 1.26+ keeps it attached). */
static __always_inline int on_sysenter(struct pt_regs *ctx)
{
    return gm_syscall_enter(ctx, 0);
}

/* runtime.exitsyscall(), nosplit, on the user g (R14). m.p: the P still held (1.26+ keeps
 * it unless it was taken; <=1.25 it is 0 during the syscall: NO_P). */
static __always_inline int on_sysexit(struct pt_regs *ctx)
{
    u64 goid = gm_goid(ctx->r14);
    s32 pid = gm_pid(rd64(gm_m(ctx) + M_P));
    gm_count_windowed(GM_C_SYS_EXIT, pid, 0, 1);
    gm_emit(GM_SYSCALL_EXIT, pid, gm_tid(), goid, 0, 0);
    return 0;
}

/* A G made runnable by a yield on g0 (RAX = gp): its latency starts now, and GM_PREEMPTED
 * says how (a0: 1 a preemption, 0 runtime.Gosched; `how`: GM_YIELD_*, counted in
 * GM_C_YIELD). Shared by the three handlers below. */
static __always_inline int gm_yielded(struct pt_regs *ctx, u64 preempted, u32 how)
{
    u64 now = bpf_ktime_get_ns();
    u64 goid = gm_goid(ctx->ax);
    gm_mark_runnable(goid, now);
    gm_count_windowed(GM_C_YIELD, NO_P, how, 1);
    gm_emit_at(now, GM_PREEMPTED, gm_pid(rd64(gm_m(ctx) + M_P)), gm_tid(), goid, preempted, 0);
    return 0;
}

/* runtime.goschedImpl(gp *g, preempted bool) (1.22+), on g0: RAX=gp, BL=1 for a preemption
 * (asyncPreempt2 / newstack via gopreempt_m), 0 for runtime.Gosched. The G becomes runnable. */
static __always_inline int on_gosched(struct pt_regs *ctx)
{
    u64 preempted = ctx->bx & 0xff;
    return gm_yielded(ctx, preempted, preempted ? GM_YIELD_PREEMPT : GM_YIELD_GOSCHED);
}

/* runtime.gosched_m(gp *g) (<=1.21; 1.22+ is seen at goschedImpl with BL=0), on g0, reached
 * by mcall (RAX = gp): runtime.Gosched and the GC sweeper's goschedIfBusy. The G becomes
 * runnable (goschedImpl: _Grunning -> _Grunnable, global runq). */
static __always_inline int on_gosched_m(struct pt_regs *ctx)
{
    return gm_yielded(ctx, 0, GM_YIELD_GOSCHED);
}

/* runtime.goyield_m(gp *g) (all versions), on g0 by mcall (RAX = gp): semrelease handed the
 * semaphore to a waiter and yields (_Grunning -> _Grunnable, its P's runq). The runtime's
 * trace calls it a preemption (GoPreempt): a0 = 1. */
static __always_inline int on_goyield(struct pt_regs *ctx)
{
    return gm_yielded(ctx, 1, GM_YIELD_HANDOFF);
}

/* runqsteal(pp, p2 *p, stealRunNextG bool) *g, entry, on g0: RAX=thief P, RBX=victim P.
 * Remembered per M until the runqgrab result site below. */
static __always_inline int on_steal_try(struct pt_regs *ctx)
{
    u32 tid = gm_tid();
    struct gm_steal s = {.thief = gm_pid(ctx->ax), .victim = gm_pid(ctx->bx)};
    steal_try.update(&tid, &s);
    return 0;
}

/* Inside runqsteal, the first emulated instruction after `CALL runtime.runqgrab` that still
 * sees its result (BinaryInfo call_results): EAX = n goroutines grabbed from the victim
 * (0 = failed attempt). Only successful steals become events; attempts are counted. */
static __always_inline int on_steal_got(struct pt_regs *ctx)
{
    u32 tid = gm_tid();
    struct gm_steal *s = steal_try.lookup(&tid);
    if (!s)
        return 0;
    s32 thief = s->thief, victim = s->victim;
    steal_try.delete(&tid);
    u32 n = (u32)ctx->ax;
    u32 key = ((u32)(thief & 0xffff) << 16) | (u32)(victim & 0xffff);
    gm_count_windowed(GM_C_STEAL_ATTEMPT, NO_P, key, 1);
    if (n) {
        gm_count_windowed(GM_C_STEAL_OK, NO_P, key, 1);
        gm_count_windowed(GM_C_STEAL_GS, NO_P, key, n);
        gm_emit(GM_STEAL, thief, tid, 0, (u64)(s64)victim, n);
    }
    return 0;
}

/* runtime.pidleput(pp *p) (1.19) / pidleput(pp *p, now int64) int64 (1.20+), entry: P goes
 * on sched.pidle, status _Pidle (sched.lock held, on g0: no stack growth, so the 1.19 jbe site
 * fires once). RAX=pp. Callers: findRunnable giving up (the P's own M, which then stopm()s or
 * keeps spinning P-less), handoffp with no work (sysmon or a syscall's M), procresize at
 * startTheWorld. Without this the model keeps a P that went idle SEARCHING until its next
 * event. Hot: as frequent as Ms going to sleep (bounded by futex waits). */
static __always_inline int on_pidleput(struct pt_regs *ctx)
{
    gm_emit(GM_P_IDLE, gm_pid(ctx->ax), gm_tid(), 0, 0, 0);
    return 0;
}

/* ---- cold probes (every mode) -------------------------------------------------------- */

/* runtime.handoffp(pp *p), on sysmon's M (retake) or g0: RAX=P, already taken from its M.
 * a0 = the P's local runq length, a1 = the global runq's (-1: unknown): handoffp starts an
 * M for the P at once when either has work, which is what tells the P's state without the
 * hot probes. */
static __always_inline int on_handoffp(struct pt_regs *ctx)
{
    s32 pid = gm_pid(ctx->ax);
    u64 goid = 0;
    u64 *g = sys_g.lookup(&pid);
    if (g)
        goid = *g;
    gm_count(GM_C_HANDOFF, pid, 0, 1);
    gm_emit(GM_HANDOFF, pid, gm_tid(), goid, gm_runqlen(ctx->ax), gm_globrunq());
    return 0;
}

/* runtime.entersyscallblock(), nosplit, user g: a syscall known to block; the P is handed off
 * at once. */
static __always_inline int on_sysenterblk(struct pt_regs *ctx)
{
    return gm_syscall_enter(ctx, 1);
}

/* runtime.preemptone(pp *p) bool, from sysmon's retake or the GC: RAX=P whose m.curg is asked
 * to stop (gp.preempt=true, SIGURG). */
static __always_inline int on_preemptone(struct pt_regs *ctx)
{
    u64 pp = ctx->ax;
    u64 goid = gm_goid(rd64(rd64(pp + P_M) + M_CURG));
    gm_count(GM_C_PREEMPT_REQ, NO_P, 0, 1);
    gm_emit(GM_PREEMPT_REQ, gm_pid(pp), gm_tid(), goid, 0, 0);
    return 0;
}

/* runtime.gopreempt_m(gp *g) (<=1.21 only; inlined away in 1.26+), on g0: RAX=gp. Always a
 * preemption (Gosched goes through gosched_m instead). */
static __always_inline int on_gopreempt(struct pt_regs *ctx)
{
    u64 now = bpf_ktime_get_ns();
    u64 goid = gm_goid(ctx->ax);
    gm_mark_runnable(goid, now);
    gm_count_windowed(GM_C_YIELD, NO_P, GM_YIELD_PREEMPT, 1);  /* cold: see cfg[1] */
    gm_emit_at(now, GM_PREEMPTED, gm_pid(rd64(gm_m(ctx) + M_P)), gm_tid(), goid, 1, 0);
    return 0;
}

/* runtime.stopTheWorldWithSema: 1.19 `()`, 1.21+ `(reason stwReason)` with AL=reason. On g0. */
static __always_inline int on_stw_stop(struct pt_regs *ctx)
{
    int zero = 0;
    u32 reason = 0;
#if STW_HAS_REASON
    reason = ctx->ax & 0xff;
#endif
    struct gm_stamp s = {.ts = bpf_ktime_get_ns(), .gen = 0, .reason = reason};
    stw_at.update(&zero, &s);
    gm_emit(GM_STW_START, gm_pid(rd64(gm_m(ctx) + M_P)), gm_tid(), 0, reason, 0);
    return 0;
}

/* The `call runtime.wakep` in runtime.startTheWorldWithSema (its entry when that is not
 * found): the Ps have been handed back, where the runtime ends its own pause measurement.
 * The reason is taken from the matching stop (the arguments changed in every version).
 * a1 = pause measured in the kernel, stop entry -> world restarted. */
static __always_inline int on_stw_start(struct pt_regs *ctx)
{
    int zero = 0;
    u64 now = bpf_ktime_get_ns();
    u32 reason = 0;
    u64 pause = 0;
    struct gm_stamp *s = stw_at.lookup(&zero);
    if (s && s->ts && now >= s->ts) {
        reason = s->reason;
        pause = now - s->ts;
        s->ts = 0;
        gm_count(GM_C_STW, NO_P, reason, 1);
        gm_count(GM_C_STW_NS, NO_P, reason, pause);
    }
    gm_emit(GM_STW_END, gm_pid(rd64(gm_m(ctx) + M_P)), gm_tid(), 0, reason, pause);
    return 0;
}

/* The user stack of a lock/semaphore wait, as struct gm_lock/gm_sema keep it: (caller pc
 * << 16) | stack id (0xffff: none). ra_off: where the direct caller's return address sits
 * relative to RSP at the entry site (LOCK_RA_OFF, SEMA_RA_OFF). */
static __always_inline u64 gm_wait_stack(struct pt_regs *ctx, u64 ra_off)
{
    int sid = stacks.get_stackid(ctx, BPF_F_USER_STACK);
    u64 caller = rd64(ctx->sp + ra_off);
    return (caller << 16) | (u64)(sid >= 0 ? (sid & 0xffff) : 0xffff);
}

/* The end of a lock/semaphore wait that began at ts (the entry already removed from its
 * map): added to its row of wait_rows; when the hash is full, a ring record pair instead
 * (MUTEX_ADDR says which lock and its GM_LOCK_* kind, MUTEX how long and from where). */
static __always_inline void gm_emit_wait(struct pt_regs *ctx, u64 goid, u64 now, u64 ts,
                                         u64 addr, u64 stack, u64 kind)
{
    u64 wait = now >= ts ? now - ts : 0;
    struct gm_wait_key k = {.addr = addr, .stack = stack, .kind = kind};
    struct gm_wait_row zero_row = {};
    struct gm_wait_row *row = wait_rows.lookup_or_try_init(&k, &zero_row);
    if (row) {
        __sync_fetch_and_add(&row->n, 1);
        __sync_fetch_and_add(&row->ns, wait);
        return;
    }
    s32 pid = gm_pid(rd64(gm_m(ctx) + M_P));
    u32 tid = gm_tid();
    gm_emit(GM_MUTEX_ADDR, pid, tid, goid, addr, kind);
    gm_emit(GM_MUTEX, pid, tid, goid, wait, stack);
}

/* sync.(*Mutex).lockSlow (1.19–1.23) / internal/sync.(*Mutex).lockSlow (1.24+), entry, on the
 * user g: RAX = the *sync.Mutex (sync.Mutex{mu isync.Mutex} puts mu at offset 0). Only
 * entered when the fast-path CAS failed: the lock is contended. The user stack is walked
 * through the frame pointers; at an entry probe it lacks the direct caller (Lock is inlined
 * into it), which is the return address at [RSP] (at [RSP+frame] when the site is past the
 * frame setup: then the frame chain already has it): kept beside the stack id. */
static __always_inline int on_lock_enter(struct pt_regs *ctx)
{
    /* Governed (cfg[2]): while the cold probes cost more than the budget, 1 contention in
     * `every` is traced, chosen at random (no shared counter to bounce between CPUs). The
     * record says its period (MUTEX_ADDR a1 >> 16): the model weighs it by that. */
    int two = 2;
    u32 *ev = cfg.lookup(&two);
    u32 every = ev && *ev > 1 ? *ev : 1;
    u64 goid = gm_goid(ctx->r14);
    if (every > 1 && bpf_get_prandom_u32() % every) {
#if !SEMA_HAS_REASON
        /* Untraced, but marked (every = 0): before 1.21 semacquire1 has no reason, and the
         * wait's semacquire1 must still be told apart from a semaphore's (on_sema_enter). */
        struct gm_lock skip = {.gen = gm_lock_gen()};
        lock_at.update(&goid, &skip);
#endif
        return 0;
    }
    u64 stack = gm_wait_stack(ctx, LOCK_RA_OFF);
    struct gm_lock l = {
        .ts = bpf_ktime_get_ns(),
        .addr = ctx->ax,
        .stack = stack,
        .every = every,
        .gen = gm_lock_gen(),
    };
    lock_at.update(&goid, &l);
    return 0;
}

/* lockSlow's way out: the emulated branches into its RET's tail (~0.7 µs, gmpmon/binary/
 * exits.py; the cookie's condition is checked in gmpmon_probe), or the RET itself without
 * uprobe_multi (single-stepped, ~25 µs, with the lock held: on Prometheus 2.42 the waiters
 * piled up behind it). R14 = the same G, possibly on another M. */
static __always_inline int on_lock_exit(struct pt_regs *ctx)
{
    u64 goid = gm_goid(ctx->r14);
    struct gm_lock *l = lock_at.lookup(&goid);
    if (!l)
        return 0;
    u64 now = bpf_ktime_get_ns();
    u64 ts = l->ts, addr = l->addr, stack = l->stack, every = l->every, gen = l->gen;
    lock_at.delete(&goid);
    if (!every || gen != gm_lock_gen())
        return 0;  /* not traced (sampled out), or entered before the sites' last pause */
    gm_emit_wait(ctx, goid, now, ts, addr, stack, GM_LOCK_MUTEX | (every << 16));
    return 0;
}

/* runtime.semacquire1(addr *uint32, lifo bool, profile semaProfileFlags, skipframes int
 * [, reason waitReason 1.21+]), entry, on the user g: RAX = addr, SIL = reason. Reached from
 * sync.RWMutex RLock/Lock, WaitGroup.Wait, internal/poll's fdMutex, the runtime's own
 * semacquire (worldsema...), and from sync.Mutex's lockSlow: that one is already measured
 * by on_lock_enter, so it is skipped (a lockSlow in progress for this goid, or 1.21+'s
 * reason "sync.Mutex.Lock"). 1.19 has no reason: every wait there is GM_LOCK_SEMA. */
static __always_inline int on_sema_enter(struct pt_regs *ctx)
{
    u64 goid = gm_goid(ctx->r14);
    struct gm_lock *held = lock_at.lookup(&goid);
    if (held && held->gen == gm_lock_gen())
        return 0;
    u64 kind = GM_LOCK_SEMA;
#if SEMA_HAS_REASON
    u32 reason = ctx->si & 0xff;
    if (reason == WR_SYNC_MUTEX)
        return 0;
    if (reason == WR_RWMUTEX_R)
        kind = GM_LOCK_RWMUTEX_R;
    else if (reason == WR_RWMUTEX_W)
        kind = GM_LOCK_RWMUTEX_W;
#endif
    u64 stack = gm_wait_stack(ctx, SEMA_RA_OFF);
    struct gm_sema w = {
        .ts = bpf_ktime_get_ns(),
        .addr = ctx->ax,
        .stack = stack,
        .kind = kind,
        .gen = gm_gen(),
    };
    sema_at.update(&goid, &w);
    return 0;
}

/* semacquire1's way out: the branches into its RETs' tails (the fast path's jcc, the call
 * of releaseSudog), or its RETs (single-stepped, ~25 µs) without uprobe_multi.
 * In the hot tier, not the cold one: net/http alone makes hundreds of fd-lock and WaitGroup
 * waits a second, which `sample` mode must not pay for. An entry from an earlier duty-cycle
 * window is dropped: the G may have left and re-entered semacquire1 while we were detached. */
static __always_inline int on_sema_exit(struct pt_regs *ctx)
{
    u64 goid = gm_goid(ctx->r14);
    struct gm_sema *w = sema_at.lookup(&goid);
    if (!w)
        return 0;
    if (w->gen != gm_gen()) {
        sema_at.delete(&goid);
        return 0;
    }
    u64 now = bpf_ktime_get_ns();
    u64 ts = w->ts, addr = w->addr, stack = w->stack, kind = w->kind;
    sema_at.delete(&goid);
    gm_emit_wait(ctx, goid, now, ts, addr, stack, kind);
    return 0;
}

/* ---- entry points --------------------------------------------------------------------- */


/* One program for every site, attached with BPF_TRACE_UPROBE_MULTI links (kernel 6.6+):
 * the attach cookie of each site says which handler runs. One link for the cold sites and
 * one for the hot ones: attaching a link is one syscall, and closing it unregisters all its
 * uprobes with a single RCU-tasks-trace wait (~30 ms here), where closing one perf-event
 * uprobe after another costs ~300 ms each: what makes default mode's duty cycle possible.
 * Handler ids (H_*) come from the probe table (gmpmon/probetable.py) as -D flags: a new
 * probe is a row there, its on_<handler> here, a case below and a GM_PROBE line. */
#if !GM_PERF_FALLBACK
int gmpmon_probe(struct pt_regs *ctx)
{
    if (!gm_mine())
        return 0;
    u64 cookie = bpf_get_attach_cookie(ctx);
    u32 h = (u32)cookie;
    gm_hit(h);
    if (!gm_cond(ctx->flags, cookie >> 32))
        return 0;
    switch (h) {
    case H_EXECUTE: return on_execute(ctx);
    case H_FINDRUNNABLE: return on_findrunnable(ctx);
    case H_GOPARK: return on_gopark(ctx);
    case H_READY: return on_ready(ctx);
    case H_GOCREATE: return on_gocreate(ctx);
    case H_NEWPROC1_RET: return on_newproc1_ret(ctx);
    case H_GOEXIT: return on_goexit(ctx);
    case H_SYSENTER: return on_sysenter(ctx);
    case H_SYSEXIT: return on_sysexit(ctx);
    case H_GOSCHED: return on_gosched(ctx);
    case H_STEAL_TRY: return on_steal_try(ctx);
    case H_STEAL_GOT: return on_steal_got(ctx);
    case H_HANDOFFP: return on_handoffp(ctx);
    case H_SYSENTERBLK: return on_sysenterblk(ctx);
    case H_PREEMPTONE: return on_preemptone(ctx);
    case H_GOPREEMPT: return on_gopreempt(ctx);
    case H_STW_STOP: return on_stw_stop(ctx);
    case H_STW_START: return on_stw_start(ctx);
    case H_LOCK_ENTER: return on_lock_enter(ctx);
    case H_LOCK_EXIT: return on_lock_exit(ctx);
    case H_PIDLEPUT: return on_pidleput(ctx);
    case H_SEMA_ENTER: return on_sema_enter(ctx);
    case H_SEMA_EXIT: return on_sema_exit(ctx);
    case H_WAKE_SCHED: return on_wake_sched(ctx);
    case H_WAKE_INJECT: return on_wake_inject(ctx);
    case H_WAKE_GCWORKER: return on_wake_gcworker(ctx);
    case H_GOSCHED_M: return on_gosched_m(ctx);
    case H_GOYIELD: return on_goyield(ctx);
    case H_WAKE_SYSEXIT: return on_wake_sysexit(ctx);
    }
    return 0;
}
#endif

/* Fallback for kernels without uprobe_multi (< 6.6): one perf-event uprobe per site, each
 * with its own program (no cookie there). Compiled only when asked (-DGM_PERF_FALLBACK=1):
 * it doubles the code BCC compiles. */
#if GM_PERF_FALLBACK
#define GM_PROBE(name, id)                         \
    int gmpmon_##name(struct pt_regs *ctx)         \
    {                                              \
        if (!gm_mine())                            \
            return 0;                              \
        gm_hit(id);                                \
        return on_##name(ctx);                     \
    }
GM_PROBE(execute, H_EXECUTE)
GM_PROBE(findrunnable, H_FINDRUNNABLE)
GM_PROBE(gopark, H_GOPARK)
GM_PROBE(ready, H_READY)
GM_PROBE(gocreate, H_GOCREATE)
GM_PROBE(newproc1_ret, H_NEWPROC1_RET)
GM_PROBE(goexit, H_GOEXIT)
GM_PROBE(sysenter, H_SYSENTER)
GM_PROBE(sysexit, H_SYSEXIT)
GM_PROBE(gosched, H_GOSCHED)
GM_PROBE(steal_try, H_STEAL_TRY)
GM_PROBE(steal_got, H_STEAL_GOT)
GM_PROBE(handoffp, H_HANDOFFP)
GM_PROBE(sysenterblk, H_SYSENTERBLK)
GM_PROBE(preemptone, H_PREEMPTONE)
GM_PROBE(gopreempt, H_GOPREEMPT)
GM_PROBE(stw_stop, H_STW_STOP)
GM_PROBE(stw_start, H_STW_START)
GM_PROBE(lock_enter, H_LOCK_ENTER)
GM_PROBE(lock_exit, H_LOCK_EXIT)
GM_PROBE(pidleput, H_PIDLEPUT)
GM_PROBE(sema_enter, H_SEMA_ENTER)
GM_PROBE(sema_exit, H_SEMA_EXIT)
GM_PROBE(wake_sched, H_WAKE_SCHED)
GM_PROBE(wake_inject, H_WAKE_INJECT)
GM_PROBE(wake_gcworker, H_WAKE_GCWORKER)
GM_PROBE(gosched_m, H_GOSCHED_M)
GM_PROBE(goyield, H_GOYIELD)
GM_PROBE(wake_sysexit, H_WAKE_SYSEXIT)
#endif /* GM_PERF_FALLBACK */
