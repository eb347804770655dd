/* Run under the TSan build with tests/lib/tsan.options: two threads write
 * one counter with nothing between them. The options must leave this
 * reported (the test passes on TSan's "data race" line), so that what they
 * quiet is libuv's blindness only, never ddprun's own accesses. */
#include <pthread.h>
#include <stdio.h>

static long counter;

static void *bump(void *arg) {
  (void)arg;
  for (int i = 0; i < 1000; i++)
    counter++;
  return NULL;
}

int main(void) {
  pthread_t a, b;
  if (pthread_create(&a, NULL, bump, NULL) != 0 ||
      pthread_create(&b, NULL, bump, NULL) != 0)
    return 1;
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  printf("counter %ld\n", counter);
  return 0;
}
