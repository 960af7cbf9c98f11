// Per-window cost of installing file bytes into a userfaultfd-registered range:
// A: O_DIRECT pread into staging + UFFDIO_COPY (the shim today), zap with MADV_DONTNEED.
// B: mmap the file's own page-cache pages MAP_FIXED over the window (MADV_POPULATE_READ),
//    evict by mapping the anonymous reservation back, UFFDIO_REGISTER, FADV_DONTNEED.
// R: B with readahead(2) over the window before the mmap.
// P: plain mmap of the file, touched, with FADV_DONTNEED + MADV_DONTNEED behind (budget).
// usage: file-pages FILE WINDOW_KIB A|B|R|P TOTAL_MIB BUDGET_MIB
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static double cpu(void){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_utime.tv_sec+r.ru_stime.tv_sec+(r.ru_utime.tv_usec+r.ru_stime.tv_usec)*1e-6;}
static volatile uint64_t sink;
static void touch(const char*p,size_t n){uint64_t s=0;for(size_t i=0;i<n;i+=64)s+=*(const volatile uint64_t*)(p+i);sink+=s;}
static int uffd;
static void reg(char*p,size_t n){struct uffdio_register r={.range={(uint64_t)p,n},.mode=UFFDIO_REGISTER_MODE_MISSING};if(ioctl(uffd,UFFDIO_REGISTER,&r)){perror("register");exit(1);}}
int main(int argc,char**argv){
  const char*path=argv[1]; size_t W=strtoul(argv[2],0,0)<<10; char mode=argv[3][0];
  size_t total=(size_t)strtoul(argv[4],0,0)<<20, budget=(size_t)strtoul(argv[5],0,0)<<20;
  int fd=open(path,O_RDONLY), dfd=open(path,O_RDONLY|O_DIRECT);
  uffd=syscall(SYS_userfaultfd,O_CLOEXEC);
  struct uffdio_api api={.api=UFFD_API};ioctl(uffd,UFFDIO_API,&api);
  posix_fadvise(fd,0,0,POSIX_FADV_DONTNEED);
  char*base=mmap(0,total,PROT_READ,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE,-1,0);
  char*stage=aligned_alloc(4096,W);
  if(mode!='P')reg(base,total);
  char*plain=mode=='P'?mmap(0,total,PROT_READ,MAP_SHARED,fd,0):0;
  size_t nres=budget/W, nw=total/W;
  double t0=now(),c0=cpu();
  for(size_t w=0;w<nw;w++){
    size_t off=w*W; char*at=base+off;
    if(mode=='A'){
      if(pread(dfd,stage,W,off)!=(ssize_t)W){perror("pread");exit(1);}
      struct uffdio_copy c={.dst=(uint64_t)at,.src=(uint64_t)stage,.len=W};
      if(ioctl(uffd,UFFDIO_COPY,&c)){perror("copy");exit(1);}
      touch(at,W);
      if(w>=nres){char*old=base+(w-nres)*W;madvise(old,W,MADV_DONTNEED);}
    }else if(mode=='B'||mode=='R'){
      if(mode=='R')readahead(fd,off,W);
      if(mmap(at,W,PROT_READ,MAP_SHARED|MAP_FIXED,fd,off)==MAP_FAILED){perror("mmap");exit(1);}
      if(madvise(at,W,MADV_POPULATE_READ)){perror("populate");exit(1);}
      touch(at,W);
      if(w>=nres){size_t o=(w-nres)*W;char*old=base+o;
        if(mmap(old,W,PROT_READ,MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE|MAP_FIXED,-1,0)==MAP_FAILED){perror("anon");exit(1);}
        reg(old,W); posix_fadvise(fd,o,W,POSIX_FADV_DONTNEED);}
    }else{
      touch(plain+off,W);
      if(w>=nres){size_t o=(w-nres)*W;madvise(plain+o,W,MADV_DONTNEED);posix_fadvise(fd,o,W,POSIX_FADV_DONTNEED);}
    }
  }
  double t=now()-t0,c=cpu()-c0;
  printf("mode %c window %zu KiB: %.3f s, cpu %.3f s, %.2f us cpu per 4 KiB\n",mode,W>>10,t,c,c*1e6/(total/4096));
  return 0;
}
