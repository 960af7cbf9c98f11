#define _GNU_SOURCE
#include <linux/userfaultfd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <fcntl.h>
static void bus(int s){ write(1,"SIGBUS: still registered after mremap\n",38); _exit(0);}
int main(){
  int u=syscall(SYS_userfaultfd,O_CLOEXEC);
  struct uffdio_api api={.api=UFFD_API,.features=UFFD_FEATURE_SIGBUS}; if(ioctl(u,UFFDIO_API,&api)){perror("api");return 1;}
  size_t L=1<<20;
  char*a=mmap(0,L,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  char*dst=mmap(0,L,PROT_READ,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  struct uffdio_register r={.range={(unsigned long)a,L},.mode=UFFDIO_REGISTER_MODE_MISSING}; if(ioctl(u,UFFDIO_REGISTER,&r)){perror("reg");return 1;}
  signal(SIGBUS,bus);
  char*m=mremap(a,L,L,MREMAP_MAYMOVE|MREMAP_FIXED,dst); if(m==MAP_FAILED){perror("mremap");return 1;}
  volatile char c=m[4096]; (void)c;
  printf("read %d: registration dropped by mremap\n", c);
  return 0;
}
