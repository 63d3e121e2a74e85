/* The cost of a hole punch on tmpfs, for bench/results/nbd-overhead/pool.md
 * (session 20): 12,288 random 4 KiB first writes into 64 KiB chunks of a
 * 1 GiB file, each followed by zeroing the rest of its chunk, CPU time per
 * write from getrusage (one thread).
 *
 *   cc -O2 -o punch_cost bench/punch_cost.c
 *   ./punch_cost FILE PREWRITTEN MODE
 *
 * FILE: a path on the file system to measure (created and removed);
 * PREWRITTEN: 1 writes the whole file first; MODE: 0 the write only,
 * 1 two punches per write, 2 lseek(SEEK_DATA) and a punch only where data
 * was found, 3 written zeroes, 4 lseek then written zeroes.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <errno.h>
#include <linux/falloc.h>

static double cpu(void){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_utime.tv_sec+r.ru_utime.tv_usec/1e6+r.ru_stime.tv_sec+r.ru_stime.tv_usec/1e6;}
static double sys_(void){struct rusage r;getrusage(RUSAGE_SELF,&r);return r.ru_stime.tv_sec+r.ru_stime.tv_usec/1e6;}
/* usage: punch FILE prewritten(0/1) mode(0 write only,1 punch,2 seekdata-then-punch,3 write zeroes) */
int main(int argc,char**argv){
  const char*path=argv[1]; int pre=atoi(argv[2]); int mode=atoi(argv[3]);
  const long SIZE=1L<<30, CH=65536, N=12288;
  unlink(path);
  int fd=open(path,O_RDWR|O_CREAT,0600); ftruncate(fd,SIZE);
  static char buf[1<<20]; memset(buf,0xab,sizeof buf);
  static char zero[65536];
  if(pre) for(long o=0;o<SIZE;o+=sizeof buf) pwrite(fd,buf,sizeof buf,o);
  long nchunks=SIZE/CH; srand(1);
  double c0=cpu(), s0=sys_(); long skipped=0;
  for(long i=0;i<N;i++){
    long q=(long)(rand()%nchunks); long coff=(rand()%16)*4096; long at=q*CH;
    pwrite(fd,buf,4096,at+coff);
    long parts[2][2]={{at,coff},{at+coff+4096,CH-coff-4096}};
    for(int p=0;p<2;p++){ long o=parts[p][0], n=parts[p][1]; if(!n) continue;
      if(mode==1) fallocate(fd,FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE,o,n);
      else if(mode==2){ off_t d=lseek(fd,o,SEEK_DATA); if(d<0||d>=o+n){skipped++;continue;} fallocate(fd,FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE,o,n);}
      else if(mode==3) pwrite(fd,zero,n,o);
      else if(mode==4){ off_t d=lseek(fd,o,SEEK_DATA); if(d<0||d>=o+n){skipped++;continue;} pwrite(fd,zero,n,o);}
    }
  }
  double c1=cpu(), s1=sys_();
  printf("pre=%d mode=%d cpu/op %.2f us (sys %.2f) skipped=%ld\n",pre,mode,(c1-c0)/N*1e6,(s1-s0)/N*1e6,skipped);
  unlink(path); return 0;
}
