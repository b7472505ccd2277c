// LD_PRELOAD helper for the device machine (no gdb there): on SIGSEGV/SIGBUS print each frame
// as "module offset" for addr2line, then re-raise. Runs on its own signal stack, so a stack
// overflow is reported too (with the faulting address and the stack limit).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static void on_fault(int sig, siginfo_t* si, void* ctx) {
  (void)ctx;
  void* frames[64];
  int n = backtrace(frames, 64);
  struct rlimit rl;
  getrlimit(RLIMIT_STACK, &rl);
  int here;
  fprintf(stderr, "SEGV_TRACE signal %d addr %p stack limit %ld, handler frame %p\n", sig,
          si->si_addr, (long)rl.rlim_cur, (void*)&here);
  for (int i = 0; i < n; ++i) {
    Dl_info d;
    if (dladdr(frames[i], &d) && d.dli_fname)
      fprintf(stderr, "SEGV_FRAME %s 0x%lx %s\n", d.dli_fname,
              (unsigned long)((char*)frames[i] - (char*)d.dli_fbase), d.dli_sname ? d.dli_sname : "?");
    else
      fprintf(stderr, "SEGV_FRAME ? %p\n", frames[i]);
  }
  fflush(stderr);
  signal(sig, SIG_DFL);
  raise(sig);
}
__attribute__((constructor)) static void install(void) {
  stack_t ss;
  ss.ss_size = 1 << 20;
  ss.ss_sp = malloc(ss.ss_size);
  ss.ss_flags = 0;
  sigaltstack(&ss, 0);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &sa, 0);
  sigaction(SIGBUS, &sa, 0);
}
