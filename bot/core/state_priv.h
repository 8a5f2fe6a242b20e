#ifndef KB_STATE_PRIV_H
#define KB_STATE_PRIV_H
/*
 * The raw SQLite handle of a store. Private to bot/core/state*.c and the
 * unit tests that inspect a database directly; every other module reaches
 * its tables through its own *_db.c and the statement calls in
 * core/state.h.
 */
#include "core/state.h"

sqlite3 *kb_state_db(struct kb_state *st);

#endif
