/* tracepoints.bpf.c — kernel raw tracepoints for the target's threads (Ms).
 *
 * Attached by name with bpf_raw_tracepoint_open (gmpmon/capture/tracepoints.py): no tracefs,
 * which these machines don't mount. The programs are plain functions gmpmon_<tracepoint>,
 * not RAW_TRACEPOINT_PROBE(), which BCC would attach as soon as the object loads: here the
 * scheduler group and the syscall group are attached separately. Everything is aggregated
 * in the kernel, no per-event record is sent: per-thread totals in `ours`/`dead` and the
 * run-queue histogram `runq_hist` (sched), `counters` (GM_COUNTER_KEY(table, p, key) ->
 * running total, syscalls); user space turns them into COUNTER deltas of the tables
 * gmpmon.events.Counter 11-19 every 100 ms.
 *
 * -D flags (gmpmon/capture/tracepoints.py):
 *   TGID                    the target process (the tgid_cfg map: kernel_common.bpf.c)
 *   G_M G_GOID M_G0 M_CURG M_PROCID M_P M_OLDP P_ID    Go struct offsets (go-runtime.md §2.1)
 *
 * No kernel struct is ever read (BCC's headers are 6.1's on a 6.18 kernel: task_struct's
 * layout is wrong there, go-runtime.md §6.2). What is used instead:
 *   - bpf_get_current_pid_tgid(): the thread a tracepoint runs on (sched_switch: prev;
 *     sys_enter/exit: the caller);
 *   - task_struct POINTERS, never dereferenced, as keys: sched_switch's prev/next and
 *     sched_wakeup's p are compared with bpf_get_current_task() values recorded when one of
 *     our threads was current (`ours`: task pointer -> tid);
 *   - sys_enter's struct pt_regs * (the user registers at the syscall: a stable ABI layout,
 *     the one ptrace exposes), from which R14 = the Go g that made the call.
 *
 * sched_switch(preempt, prev, next, prev_state) — runs on the CPU that switches, current =
 * prev:
 *   prev ours  -> on-CPU time of that M += now - the previous sched_switch on this CPU
 *                 (`cpu_switch_at`: that is when prev was switched in; known for every
 *                 thread, even one never seen before); it is off CPU from now; prev_state == 0 (TASK_RUNNING) means the kernel
 *                 preempted it (involuntary, still runnable: its run-queue wait starts now),
 *                 else it blocked (voluntary).
 *   next ours  -> off-CPU time += now - off_since; if it was runnable (woken, or preempted),
 *                 its kernel run-queue delay = now - runnable_since: per M and a histogram.
 * sched_wakeup(p) / sched_wakeup_new: p ours -> runnable since now (unless already).
 * sched_process_exit(p): current ours -> forget its task pointer (it may be reused).
 * A thread is known once it has been seen as current (a switch-out, a syscall): its first
 * off-CPU interval and run-queue wait after attaching are not measured (its on-CPU time is).
 *
 * sys_enter(regs, id) / sys_exit(regs, ret), for the target's threads only: the syscall
 * number and its P and G are noted at entry (per tid), the count and duration added at exit
 * under (P, number, tid) and per goroutine. The P is m.p, or m.oldp when entersyscall has
 * already detached it (Go <= 1.25); the G is m.curg when R14 validates as a g of this M
 * (m.curg == g or m.g0 == g, m.procid == tid), else none: runtime code on g0 (futex in the
 * scheduler) has P but no G, and a thread whose R14 does not validate (cgo) neither.
 * These two fire for every syscall of the system (the kernel's syscall-tracepoint slow path
 * is on for every task while they are attached), which is why they are a separate, opt-in
 * group (`syscalls`), measured on its own.
 */
/* rd64, rd32, gm_count, `counters`, `ctr_full`: kernel_common.bpf.c, compiled in front */

#define GM_C_M_ONCPU_NS   11
#define GM_C_M_OFFCPU_NS  12
#define GM_C_M_RUNQ_NS    13
#define GM_C_M_SWITCHES   14
#define GM_C_RUNQ_LAT     15
#define GM_C_SYS_COUNT    16
#define GM_C_SYS_NS       17
#define GM_C_SYS_G_COUNT  18
#define GM_C_SYS_G_NS     19
#define M_SW_RUNQ         0
#define M_SW_VOLUNTARY    1
#define M_SW_INVOLUNTARY  2

/* struct pt_regs (x86-64, the ptrace layout): r15 at 0, r14 at 8. */
#define PT_REGS_R14_OFF 8

/* The target's threads, keyed by task_struct pointer (never dereferenced: a key only),
 * entered when one is seen current (a switch-out, a syscall). Per thread: when it went off
 * CPU and became runnable, and its running totals, which user space reads (batch lookup)
 * every 100 ms as COUNTER deltas per tid. One hash lookup per side of a switch: the totals
 * live here rather than in `counters`, whose every update is another hash operation. */
struct gm_thr {
    u32 tid;
    u32 pad;
    u64 off_since;       /* switched out at (0: unknown) */
    u64 runnable_since;  /* woken or preempted at (0: not runnable) */
    u64 on_ns;           /* totals: Counter.M_ONCPU_NS, M_OFFCPU_NS, M_RUNQ_NS */
    u64 off_ns;
    u64 runq_ns;
    u64 runq_n;          /* Counter.M_SWITCHES keys M_SW_RUNQ, _VOLUNTARY, _INVOLUNTARY */
    u64 vol;
    u64 invol;
};
BPF_HASH(ours, u64, struct gm_thr, 8192);
/* tid -> final totals of a thread that exited (its `ours` entry is deleted: the pointer may
 * be reused by any task); user space takes the last delta and deletes the entry. */
BPF_HASH(dead, u32, struct gm_thr, 8192);
/* Run-queue delay histogram (gm_lat_bucket), per CPU: no hash operation per wait. */
BPF_PERCPU_ARRAY(runq_hist, u64, 256);

/* per CPU: when its last sched_switch happened (0: none since attaching) */
BPF_PERCPU_ARRAY(cpu_switch_at, u64, 1);

static __always_inline struct gm_thr *gm_thr_of_current(u64 task, u32 tid)
{
    struct gm_thr *t = ours.lookup(&task);
    if (t)
        return t;
    struct gm_thr fresh = {.tid = tid};
    ours.update(&task, &fresh);
    return ours.lookup(&task);
}

struct gm_sys {
    u64 ts;
    u64 goid;
    s32 p;
    u32 nr;
};
BPF_HASH(in_sys, u32, struct gm_sys, 8192);

/* ---- scheduler: on-CPU, off-CPU, run-queue delay of each M --------------------------- */

int gmpmon_sched_switch(struct bpf_raw_tracepoint_args *ctx)
{
    u64 now = bpf_ktime_get_ns();
    u64 prev = ctx->args[1];
    u64 next = ctx->args[2];
    u64 prev_state = ctx->args[3];
    u64 pt = bpf_get_current_pid_tgid();
    int z = 0;
    u64 *last = cpu_switch_at.lookup(&z);
    u64 since = last ? *last : 0;
    if (last)
        *last = now;

    if ((pt >> 32) == TGID) {
        struct gm_thr *t = gm_thr_of_current(prev, (u32)pt);
        if (t) {
            if (since && now > since)
                t->on_ns += now - since;
            t->off_since = now;
            if ((prev_state & 0xff) == 0) {   /* TASK_RUNNING: preempted, still runnable */
                t->runnable_since = now;
                t->invol += 1;
            } else {
                t->runnable_since = 0;
                t->vol += 1;
            }
        }
    }
    struct gm_thr *n = ours.lookup(&next);
    if (n) {
        if (n->off_since && now > n->off_since)
            n->off_ns += now - n->off_since;
        if (n->runnable_since && now > n->runnable_since) {
            u64 d = now - n->runnable_since;
            n->runq_ns += d;
            n->runq_n += 1;
            u32 b = gm_lat_bucket(d);
            u64 *h = runq_hist.lookup(&b);
            if (h)
                *h += 1;
        }
        n->runnable_since = 0;
        n->off_since = 0;
    }
    return 0;
}

static __always_inline int gm_woken(u64 task)
{
    struct gm_thr *t = ours.lookup(&task);
    if (t && !t->runnable_since)
        t->runnable_since = bpf_ktime_get_ns();
    return 0;
}

int gmpmon_sched_wakeup(struct bpf_raw_tracepoint_args *ctx)
{
    return gm_woken(ctx->args[0]);
}

int gmpmon_sched_wakeup_new(struct bpf_raw_tracepoint_args *ctx)
{
    return gm_woken(ctx->args[0]);
}

int gmpmon_sched_process_exit(struct bpf_raw_tracepoint_args *ctx)
{
    u64 pt = bpf_get_current_pid_tgid();
    if ((pt >> 32) != TGID)
        return 0;
    u64 task = bpf_get_current_task();
    u32 tid = (u32)pt;
    struct gm_thr *t = ours.lookup(&task);
    if (t) {
        struct gm_thr final = *t;
        dead.update(&tid, &final);
        ours.delete(&task);
    }
    in_sys.delete(&tid);
    return 0;
}

/* ---- syscalls: count and time per (P, number, M) and per G --------------------------- */

int gmpmon_sys_enter(struct bpf_raw_tracepoint_args *ctx)
{
    u64 pt = bpf_get_current_pid_tgid();
    if ((pt >> 32) != TGID)
        return 0;
    u32 tid = (u32)pt;
    gm_thr_of_current(bpf_get_current_task(), tid);

    struct gm_sys s = {.ts = 0, .goid = 0, .p = NO_P, .nr = (u32)ctx->args[1]};
    u64 g = 0;
    bpf_probe_read_kernel(&g, sizeof(g), (void *)(ctx->args[0] + PT_REGS_R14_OFF));
    u64 m = rd64(g + G_M);
    if (m && (u32)rd64(m + M_PROCID) == tid) {
        u64 curg = rd64(m + M_CURG);
        if (curg == g || rd64(m + M_G0) == g) {
            if (curg == g)
                s.goid = rd64(g + G_GOID);
            u64 pp = rd64(m + M_P);
            if (!pp)
                pp = rd64(m + M_OLDP);   /* entersyscall moved it there (Go <= 1.25) */
            if (pp)
                s.p = (s32)rd32(pp + P_ID);
        }
    }
    s.ts = bpf_ktime_get_ns();
    in_sys.update(&tid, &s);
    return 0;
}

int gmpmon_sys_exit(struct bpf_raw_tracepoint_args *ctx)
{
    u64 pt = bpf_get_current_pid_tgid();
    if ((pt >> 32) != TGID)
        return 0;
    u32 tid = (u32)pt;
    struct gm_sys *s = in_sys.lookup(&tid);
    if (!s || !s->ts)
        return 0;
    u64 now = bpf_ktime_get_ns();
    u64 d = now > s->ts ? now - s->ts : 0;
    u32 key = (s->nr & 0x3ff) | (tid << 10);
    gm_count(GM_C_SYS_COUNT, s->p, key, 1);
    gm_count(GM_C_SYS_NS, s->p, key, d);
    gm_count(GM_C_SYS_G_COUNT, NO_P, (u32)s->goid, 1);
    gm_count(GM_C_SYS_G_NS, NO_P, (u32)s->goid, d);
    s->ts = 0;
    return 0;
}
