/*
 * dio-write-refused-by-verify-zeroes-dirty-block: the trigger.
 *
 * For each round: a new 1.5 MiB file written buffered and fsynced (its blocks
 * dirty in the open txg), then one 4 KiB write at 4096 from a page-aligned
 * buffer another thread keeps flipping between two patterns while the write
 * is in flight (bytes 1..120 and 128..247). On a dataset with direct=always the write is Direct I/O; write
 * verify may refuse it (EIO). Afterwards the 4 KiB must hold the old bytes
 * (refused) or the write's bytes (each byte one of the two patterns). Zeros
 * are the bug.
 *
 * Usage: repro DIR ROUNDS.  Exit: 1 zeros seen, 0 not, 2 error.
 * cc -O2 -pthread -o repro repro.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define BLK 4096
#define FILE_SIZE (1536 * 1024)
#define OLD 'G'

static char *buf, first[BLK], second[BLK];
static atomic_int stop, flipping;

static void *racer(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		memcpy(buf, second, BLK);
		/* a compiler barrier: without it the first copy is a dead store */
		atomic_signal_fence(memory_order_seq_cst);
		memcpy(buf, first, BLK);
		atomic_signal_fence(memory_order_seq_cst);
		atomic_store(&flipping, 1);
	}
	return NULL;
}

static int round_once(const char *dir, int r, int *refused)
{
	char path[4096], got[BLK];
	static char old[FILE_SIZE];
	pthread_t t;
	int fd, zeros = 0, other = 0;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/f%d", dir, r);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) { perror(path); return -1; }
	memset(old, OLD, sizeof(old));
	if (pwrite(fd, old, sizeof(old), 0) != sizeof(old) || fsync(fd) != 0) {
		perror("lay down"); return -1;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);

	atomic_store(&stop, 0);
	atomic_store(&flipping, 0);
	memcpy(buf, first, BLK);
	pthread_create(&t, NULL, racer, NULL);
	while (!atomic_load(&flipping))
		;
	n = pwrite(fd, buf, BLK, BLK);          /* Direct I/O: direct=always */
	int err = errno;
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	*refused = (n < 0 && err == EIO);
	if (n < 0 && err != EIO) { fprintf(stderr, "pwrite: %s\n", strerror(err)); return -1; }

	if (pread(fd, got, BLK, BLK) != BLK) { perror("read back"); return -1; }
	int nfirst = 0, nsecond = 0, nold = 0;
	for (int i = 0; i < BLK; i++) {
		if (got[i] == first[i])
			nfirst++;
		else if (got[i] == second[i])
			nsecond++;
		else if (got[i] == OLD && n < 0)
			nold++;
		else if (got[i] == 0)
			zeros++;
		else
			other++;
	}
	printf("round %d: write %s; read back: %d bytes of the write's first pattern, %d of its "
	       "second, %d old, %d zero, %d other\n", r, n < 0 ? "refused (EIO)" : "accepted",
	       nfirst, nsecond, nold, zeros, other);
	close(fd);
	return zeros || other;
}

int main(int argc, char **argv)
{
	int rounds = argc > 2 ? atoi(argv[2]) : 10, refused_n = 0, bad = 0;

	if (argc < 2) { fprintf(stderr, "usage: %s DIR [ROUNDS]\n", argv[0]); return 2; }
	for (int i = 0; i < BLK; i++) {      /* two patterns, neither byte 0 nor OLD */
		first[i] = (char)(1 + (i * 7 + 3) % 120);
		second[i] = (char)(128 + (i * 13 + 5) % 120);
	}
	buf = mmap(NULL, BLK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) { perror("mmap"); return 2; }
	for (int r = 1; r <= rounds; r++) {
		int refused = 0, rc = round_once(argv[1], r, &refused);
		if (rc < 0)
			return 2;
		refused_n += refused;
		if (rc > 0) {
			bad++;
			break;
		}
	}
	printf("%d refused writes; %d rounds left wrong bytes\n", refused_n, bad);
	return bad ? 1 : 0;
}
