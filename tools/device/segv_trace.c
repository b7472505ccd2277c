// LD_PRELOAD helper for the device machine (no gdb there): on SIGSEGV/SIGABRT print each frame
// as "module offset" for addr2line, then re-raise.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void on_fault(int sig, siginfo_t* si, void* ctx) {
  (void)ctx;
  void* frames[64];
  int n = backtrace(frames, 64);
  fprintf(stderr, "SEGV_TRACE signal %d addr %p\n", sig, si->si_addr);
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
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, 0);
  sigaction(SIGBUS, &sa, 0);
}
