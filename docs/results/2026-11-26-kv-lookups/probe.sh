#!/bin/bash
# probe.sh SYSTEM DIR WORKLOAD MEM: one worker in a fresh v1 memory cgroup (MEM + 8 MiB), data
# files dropped from the page cache first; perf counts faults and block requests.
s=$1; d=$2; w=$3; mem=$4
cg=/sys/fs/cgroup/memory/kvprobe-$$
mkdir $cg; echo $((mem + (8<<20))) > $cg/memory.limit_in_bytes
for f in $d/data $d/wal $d/data.mmap $d/data.mdb; do [ -f $f ] && python3 -c "import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" $f; done
perf stat -x, -e major-faults,minor-faults,block:block_rq_issue,syscalls:sys_enter_pread64,syscalls:sys_enter_preadv,syscalls:sys_enter_io_uring_enter -- \
  /work/wt-kv2/target/release/ucache-kv worker --system $s --dir $d --keys 400000 --memory $mem --workload $w --seconds 3 --warmup 1 --cgroup $cg 2>&1 | grep -o 'RESULT.*ops_per_sec":[0-9.]*\|^[0-9]*,,[a-z_:0-9-]*' | sed 's/RESULT.*ops_per_sec"://'
rmdir $cg
