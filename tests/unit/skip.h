#ifndef KB_TEST_SKIP_H
#define KB_TEST_SKIP_H
/*
 * Skip a cmocka test and say why: the reason goes to standard output as
 * "kb-skip: REASON" right before cmocka's "[  SKIPPED ] name", and
 * tests/run.sh shows it beside the test's name. Include after <cmocka.h>.
 */
#include <stdio.h>

#define KB_SKIP(reason) \
	do { \
		printf("kb-skip: %s\n", (reason)); \
		fflush(stdout); \
		skip(); \
	} while (0)

#endif
