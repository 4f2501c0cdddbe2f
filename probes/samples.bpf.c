/* samples.bpf.c — perf-event samples of the target's threads (linux/amd64, Go 1.19–1.27).
 *
 * A software cpu-clock perf event fires SAMPLE_HZ times a second on every CPU (opened
 * system-wide, one per CPU, by gmpmon/capture/perfsample.py); this program keeps the samples
 * whose task belongs to TGID and drops everything else at once. It costs the target nothing
 * per scheduler event: only the timer interrupt that lands on one of its threads, with the
 * few user-memory reads below.
 *
 * -D flags (gmpmon/capture/perfsample.py):
 *   TGID                  the target process (the tgid_cfg map: kernel_common.bpf.c)
 *   G_M G_GOID            runtime.g fields      (go-runtime.md §2.1)
 *   M_G0 M_CURG M_PROCID M_P                    runtime.m fields
 *   P_ID P_STATUS                               runtime.p fields
 *   RINGBUF_PAGES         size of the `events` ring buffer
 *
 * Which goroutine was running: on a user-mode sample (CS & 3 == 3) inside Go code, R14 is
 * the current g (ABIInternal keeps it there: go-runtime.md §6.2). In cgo or assembly R14 is
 * anything, so it is validated before anything is believed:
 *     m = g.m;  m.curg == g  or  m.g0 == g;  and m.procid == this thread's id.
 * The last check ties the g to the thread the interrupt landed on: a stale or forged pointer
 * that happens to satisfy the first two (an old g whose m moved on) fails it. A sample that
 * fails is SAMPLE_NOT_GO ("not in Go": cgo, assembly that uses R14, a signal handler) and
 * carries no G or P. On g0 (scheduler, GC work on the system stack, morestack) the sample is
 * SAMPLE_G0 and names m.curg (0 when the M has dropped its G).
 *
 * A kernel-mode sample (a syscall, a page fault) has the kernel's registers, not the user's,
 * and reading the user's pt_regs would mean reading task_struct, which the 6.1 headers on a
 * 6.18 kernel lay out wrongly (go-runtime.md §6.2): never done here. Instead the thread's
 * last validated user-mode sample (`last_g`, keyed by tid) names its G and P, and the sample
 * is SAMPLE_KERNEL. The user stack is still right: bpf_get_stackid(BPF_F_USER_STACK) takes the
 * user registers saved at kernel entry.
 *
 * User stacks: frame pointers (Go keeps RBP chains on amd64), walked by the kernel into
 * `stacks`. The map is not created with BPF_F_REUSE_STACKID: once full, or on a hash
 * collision, new stacks get no id (the record then carries -errno, FLAG_A1_PC is set and a1
 * is the leaf pc alone) rather than silently renaming an old stack id.
 * A frameless leaf (Go gives small leaf functions no frame, and a prologue before
 * `mov rbp, rsp` has none yet) hides its caller from the RBP chain: the caller's return
 * address is then the word at [RSP]. It is sent in a1; user space inserts it as frame 1 only
 * when the bytes before it are a CALL of the leaf function (gmpmon/capture/perfsample.py).
 *
 * Record: GM_CPU_SAMPLE, p = P id (-1 none), m = tid, g = goid (0 none),
 *   a0 = outcome | P status << 8 | flags << 16 | (u32)stack id << 32,
 *   a1 = the word at user [RSP] (0 in kernel mode), or the user pc with FLAG_A1_PC.
 * Outcome counts also go to `counters` (table GM_C_SAMPLES, key = outcome), exactly, even when
 * the ring buffer is full: user space turns the sampler off with one line when R14 never
 * validates (wrong offsets would otherwise report garbage).
 */
#include <uapi/linux/bpf_perf_event.h>
/* rd64, rd32, gm_count, `counters`, `ctr_full`: kernel_common.bpf.c, compiled in front */

#define GM_CPU_SAMPLE 60
#define GM_C_SAMPLES 10

#define SAMPLE_GO     0  /* user mode, R14 = m.curg: a user goroutine ran */
#define SAMPLE_G0     1  /* user mode, R14 = m.g0: runtime on the system stack */
#define SAMPLE_NOT_GO 2  /* user mode, R14 is not a g of this thread */
#define SAMPLE_KERNEL 3  /* kernel mode: G/P from this thread's last user-mode sample */
#define FLAG_A1_PC 1     /* no stack id: a1 is the user pc (else the word at [RSP]) */

BPF_RINGBUF_OUTPUT(events, RINGBUF_PAGES);
BPF_PERCPU_ARRAY(lost, u64, 1);   /* sample records dropped: ring buffer full */
BPF_STACK_TRACE(stacks, 16384);

struct gm_last {
    u64 goid;
    s32 p;
    u32 pstatus;
};
/* tid -> G and P of its last validated user-mode sample (for kernel-mode samples). */
BPF_F_TABLE("lru_hash", u32, struct gm_last, last_g, 4096, 0);

int gmpmon_cpu_sample(struct bpf_perf_event_data *ctx)
{
    u64 pt = bpf_get_current_pid_tgid();
    if ((pt >> 32) != TGID)
        return 0;
    u32 tid = (u32)pt;
    u32 outcome = SAMPLE_NOT_GO;
    u64 goid = 0, pc = 0, top = 0;
    s32 p = -1;
    u32 pstatus = 0;

    if ((ctx->regs.cs & 3) == 3) {
        u64 g = ctx->regs.r14;
        pc = ctx->regs.ip;
        top = rd64(ctx->regs.sp);
        u64 m = rd64(g + G_M);   /* a failed read (garbage R14) leaves 0 */
        if (m) {
            u64 curg = rd64(m + M_CURG);
            u64 g0 = rd64(m + M_G0);
            u32 procid = (u32)rd64(m + M_PROCID);
            if (procid == tid && (curg == g || g0 == g)) {
                outcome = curg == g ? SAMPLE_GO : SAMPLE_G0;
                goid = curg ? rd64(curg + G_GOID) : 0;
                u64 pp = rd64(m + M_P);
                if (pp) {
                    p = (s32)rd32(pp + P_ID);
                    pstatus = rd32(pp + P_STATUS);
                }
                struct gm_last l = {.goid = goid, .p = p, .pstatus = pstatus};
                last_g.update(&tid, &l);
            }
        }
    } else {
        outcome = SAMPLE_KERNEL;
        struct gm_last *l = last_g.lookup(&tid);
        if (l) {
            goid = l->goid;
            p = l->p;
            pstatus = l->pstatus;
        }
    }
    gm_count(GM_C_SAMPLES, -1, outcome, 1);
    s64 sid = stacks.get_stackid(ctx, BPF_F_USER_STACK);
    u64 flags = 0;
    if (sid < 0 && pc) {
        flags = FLAG_A1_PC;
        top = pc;
    }

    struct gm_event *e = events.ringbuf_reserve(sizeof(struct gm_event));
    if (!e) {
        int zero = 0;
        u64 *lp = lost.lookup(&zero);
        if (lp)
            *lp += 1;
        return 0;
    }
    e->ts = bpf_ktime_get_ns();
    e->kind = GM_CPU_SAMPLE;
    e->p = p;
    e->m = tid;
    e->pad = 0;
    e->g = goid;
    e->a0 = outcome | ((u64)(pstatus & 0xff) << 8) | (flags << 16) | ((u64)(u32)sid << 32);
    e->a1 = top;
    events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
    return 0;
}
