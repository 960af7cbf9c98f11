// Does UFFDIO_REGISTER accept a PROT_NONE anonymous area, and does the registration survive
// mprotect(PROT_READ) so that a read of an absent page then raises SIGBUS (UFFD_FEATURE_SIGBUS)?
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
static sigjmp_buf jb; static volatile int sig;
static void h(int s) { sig = s; siglongjmp(jb, 1); }
int main(void) {
    int uffd = syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_SIGBUS};
    if (ioctl(uffd, UFFDIO_API, &api)) { perror("api"); return 1; }
    size_t len = 1 << 20;
    char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct uffdio_register r = {.range = {(unsigned long)p, len}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    int rc = ioctl(uffd, UFFDIO_REGISTER, &r);
    printf("register on PROT_NONE: %d\n", rc);
    signal(SIGBUS, h); signal(SIGSEGV, h);
    sig = 0; if (!sigsetjmp(jb, 1)) { volatile char c = p[0]; (void)c; }
    printf("read while PROT_NONE: signal %d (SIGSEGV=%d)\n", sig, SIGSEGV);
    mprotect(p, len, PROT_READ);
    sig = 0; if (!sigsetjmp(jb, 1)) { volatile char c = p[4096]; (void)c; }
    printf("read after mprotect READ: signal %d (SIGBUS=%d)\n", sig, SIGBUS);
    return 0;
}
