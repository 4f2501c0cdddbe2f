/* kernel_common.bpf.c — what samples.bpf.c and tracepoints.bpf.c share. Not a header: BCC
 * rewrites map accesses (`counters.lookup_or_try_init`) only in the main file, so this text is
 * put in front of one source or of both (gmpmon/capture/kernelbpf.py:compile_program): gmpmon
 * loads both as one object, one BCC compile instead of two (seconds each; BCC crashes
 * compiling two programs at once in one process); tests may load one source alone.
 */

#include <uapi/linux/ptrace.h>
#include "gmpmon.h"

#ifndef NO_P
#define NO_P (-1)
#endif

/* GM_COUNTER_KEY(table, p, key) -> running total; tables gmpmon.events.Counter 10-19. */
BPF_HASH(counters, u64, u64, 32768);
/* Counter updates that found `counters` full (user space reports them as LOST). */
BPF_PERCPU_ARRAY(ctr_full, u64, 1);
/* The target process, set by user space once loaded (gmpmon/capture/bpfobj.py): a map, not
 * a -D define, so one compiled object serves every process of a binary. Unset (0) it names
 * no process: the idle task's tgid 0 is never ours. The same text is in gmpmon.bpf.c and
 * kernel_common.bpf.c: BCC rewrites map accesses only in the main file, not in a header. */
BPF_ARRAY(tgid_cfg, u32, 1);

static __always_inline u32 gm_target(void)
{
    int z = 0;
    u32 *t = tgid_cfg.lookup(&z);
    return t && *t ? *t : 0xffffffff;
}
#define TGID gm_target()

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

static __always_inline void gm_count(u32 table, s32 p, u32 key, u64 delta)
{
    u64 k = GM_COUNTER_KEY(table, p, key);
    u64 zero = 0;
    u64 *v = counters.lookup_or_try_init(&k, &zero);
    if (v) {
        __sync_fetch_and_add(v, delta);
    } else {
        int z = 0;
        u64 *l = ctr_full.lookup(&z);
        if (l)
            *l += 1;
    }
}
