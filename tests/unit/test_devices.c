/*
 * Devices of their own for jobs run at once (issue 16): the daemon's lease
 * allocator (jobs/devices.h), the driver's GPU listing (core/nvidia.h) and
 * the device nodes a sandbox binds for a CUDA_VISIBLE_DEVICES
 * (kb_sandbox_gpu_nodes) on fake /dev and /proc trees, and the lease in
 * the evidence's placement (harness_pool.h).
 */
#include "core/common.h"
#include "core/config.h"
#include "core/log.h"
#include "core/nvidia.h"
#include "core/strbuf.h"
#include "core/strvec.h"
#include "core/util.h"
#include "jobs/devices.h"
#include "verifier/harness_pool.h"
#include "verifier/sandbox.h"

#include <setjmp.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <sys/stat.h>

/* --- fake trees --- */

struct tree {
	char root[64];
	char dev[96], proc[96];
};

static void write_text(const char *path, const char *text)
{
	char *dir = xstrdup(path), *slash = strrchr(dir, '/');

	*slash = '\0';
	assert_int_equal(kb_mkdir_p(dir, 0755), 0);
	assert_int_equal(kb_write_file_atomic(path, text, strlen(text)), 0);
	free(dir);
}

static void add_gpu(struct tree *t, const char *bus, const char *uuid, int minor, bool node)
{
	char path[256], text[512];

	xsnprintf(path, sizeof(path), "%s/driver/nvidia/gpus/%s/information", t->proc, bus);
	xsnprintf(text, sizeof(text),
		  "Model: \t\t NVIDIA H200\nIRQ:   \t\t 42\nGPU UUID: \t %s\nVideo BIOS: \t 96.00\n"
		  "Bus Location: \t %s\nDevice Minor: \t %d\nGPU Excluded:\t No\n", uuid, bus, minor);
	write_text(path, text);
	if (node) {
		xsnprintf(path, sizeof(path), "%s/nvidia%d", t->dev, minor);
		write_text(path, "");
	}
}

/*
 * Three GPUs whose minors are not in bus order (the listing's folders are
 * made out of order too), the control nodes but nvidia-modeset, and an
 * NVSwitch node a job's process never needs.
 */
static int tree_setup(void **state)
{
	struct tree *t = xcalloc(1, sizeof(*t));
	char path[256];

	kb_strlcpy(t->root, "/tmp/kb-test-devices-XXXXXX", sizeof(t->root));
	assert_non_null(mkdtemp(t->root));
	xsnprintf(t->dev, sizeof(t->dev), "%s/dev", t->root);
	xsnprintf(t->proc, sizeof(t->proc), "%s/proc", t->root);
	add_gpu(t, "0000:C1:00.0", "GPU-cccc-0001", 0, true);
	add_gpu(t, "0000:18:00.0", "GPU-aaaa-0001", 2, true);
	add_gpu(t, "0000:3b:00.0", "GPU-bbbb-0001", 1, true);
	for (const char *const *n = (const char *const[]){ "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
							   "nvidia-nvswitch0", NULL }; *n; n++) {
		xsnprintf(path, sizeof(path), "%s/%s", t->dev, *n);
		write_text(path, "");
	}
	xsnprintf(path, sizeof(path), "%s/nvidia-caps/nvidia-cap1", t->dev);
	write_text(path, "");
	*state = t;
	return 0;
}

static int tree_teardown(void **state)
{
	struct tree *t = *state;

	kb_rm_rf(t->root);
	free(t);
	return 0;
}

/* nodes, relative to dev, as one comma list */
static void nodes_text(const struct tree *t, const struct strvec *nodes, struct strbuf *out)
{
	size_t n = strlen(t->dev);

	strbuf_reset(out);
	for (size_t i = 0; i < nodes->nr; i++) {
		assert_int_equal(strncmp(nodes->v[i], t->dev, n), 0);
		strbuf_addf(out, "%s%s", i ? "," : "", nodes->v[i] + n + 1);
	}
}

/* kb_sandbox_gpu_nodes's answer: rc, the nodes (dev-relative) into got, why into why */
static int gpu_nodes(const struct tree *t, const char *visible, const char *order, struct strbuf *got,
		     struct strbuf *why)
{
	struct strvec nodes = STRVEC_INIT;
	int rc;

	strbuf_reset(why);
	rc = kb_sandbox_gpu_nodes(t->dev, t->proc, visible, order, &nodes, why);
	nodes_text(t, &nodes, got);
	strvec_clear(&nodes);
	return rc;
}

#define CONTROL "nvidiactl,nvidia-uvm,nvidia-uvm-tools,nvidia-caps"

static void test_listing_in_bus_order(void **state)
{
	struct tree *t = *state;
	struct kb_nvidia_gpu *g;
	struct strbuf why = STRBUF_INIT;
	size_t nr;

	assert_int_equal(kb_nvidia_gpus(t->proc, &g, &nr, &why), 0);
	assert_int_equal(nr, 3);
	assert_string_equal(g[0].bus_id, "0000:18:00.0");
	assert_string_equal(g[0].uuid, "GPU-aaaa-0001");
	assert_int_equal(g[0].minor, 2);
	assert_string_equal(g[1].bus_id, "0000:3b:00.0");
	assert_int_equal(g[1].minor, 1);
	assert_string_equal(g[2].bus_id, "0000:c1:00.0"); /* lower case, sorted as such */
	assert_int_equal(g[2].minor, 0);
	assert_false(g[0].excluded);
	free(g);
	assert_false(kb_nvidia_has_mig(t->proc));
	assert_int_equal(kb_nvidia_gpus("/nonexistent-proc", &g, &nr, &why), -1);
	assert_non_null(strstr(why.buf, "no NVIDIA driver listing"));
	assert_null(g);
	strbuf_release(&why);
}

static void test_nodes_of_the_visible_gpus(void **state)
{
	struct tree *t = *state;
	struct strbuf got = STRBUF_INIT, why = STRBUF_INIT;

	/* index i: the i-th GPU by PCI bus id, whatever its minor */
	assert_int_equal(gpu_nodes(t, "0", NULL, &got, &why), 0);
	assert_string_equal(got.buf, "nvidia2," CONTROL);
	assert_int_equal(gpu_nodes(t, "2,1", "PCI_BUS_ID", &got, &why), 0);
	assert_string_equal(got.buf, "nvidia0,nvidia1," CONTROL);
	/* a UUID maps directly, any case */
	assert_int_equal(gpu_nodes(t, "GPU-CCCC-0001", NULL, &got, &why), 0);
	assert_string_equal(got.buf, "nvidia0," CONTROL);
	assert_int_equal(gpu_nodes(t, " 1 , GPU-aaaa-0001", NULL, &got, &why), 0);
	assert_string_equal(got.buf, "nvidia1,nvidia2," CONTROL);
	/* no GPU at all: the control nodes only */
	assert_int_equal(gpu_nodes(t, "", NULL, &got, &why), 0);
	assert_string_equal(got.buf, CONTROL);
	assert_int_equal((int)why.len, 0);
	strbuf_release(&got);
	strbuf_release(&why);
}

#define EVERY "nvidia-caps,nvidia-nvswitch0,nvidia-uvm,nvidia-uvm-tools,nvidia0,nvidia1,nvidia2,nvidiactl"

/* rc 1, every node, and why containing what */
static void binds_every_node(const struct tree *t, const char *visible, const char *order, const char *what)
{
	struct strbuf got = STRBUF_INIT, why = STRBUF_INIT;

	assert_int_equal(gpu_nodes(t, visible, order, &got, &why), 1);
	assert_string_equal(got.buf, EVERY);
	if (!what)
		assert_int_equal((int)why.len, 0);
	else if (!strstr(why.buf, what))
		fail_msg("'%s': why '%s' does not say '%s'", visible, why.buf, what);
	strbuf_release(&got);
	strbuf_release(&why);
}

static void test_unmappable_binds_every_node(void **state)
{
	struct tree *t = *state;
	char path[256];

	binds_every_node(t, NULL, NULL, NULL); /* unset: every GPU is the process's */
	binds_every_node(t, "MIG-1234abcd-0000-0000-0000-000000000000", NULL, "MIG instance");
	binds_every_node(t, "3", NULL, "the driver lists 3 GPUs");
	binds_every_node(t, "GPU-dddd-0001", NULL, "no GPU of the driver's listing has the UUID");
	binds_every_node(t, "0,x", NULL, "CUDA_VISIBLE_DEVICES: 'x' is not a device");
	binds_every_node(t, "0", "FASTEST_FIRST", "CUDA_DEVICE_ORDER=FASTEST_FIRST");
	/* a GPU before the one named that CUDA cannot open (a device cgroup) renumbers the rest */
	xsnprintf(path, sizeof(path), "%s/nvidia2", t->dev);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mkdir(path, 0755), 0);
	binds_every_node(t, "1", NULL, "nvidia2' cannot be opened");
	/* by UUID the numbering does not matter */
	{
		struct strbuf got = STRBUF_INIT, why = STRBUF_INIT;

		assert_int_equal(gpu_nodes(t, "GPU-bbbb-0001", NULL, &got, &why), 0);
		assert_string_equal(got.buf, "nvidia1," CONTROL);
		strbuf_release(&got);
		strbuf_release(&why);
	}
	assert_int_equal(rmdir(path), 0);
	{
		struct strbuf got = STRBUF_INIT, why = STRBUF_INIT;

		assert_int_equal(gpu_nodes(t, "0", NULL, &got, &why), 1);
		assert_non_null(strstr(why.buf, "nvidia2' (GPU 0000:18:00.0) is missing"));
		assert_null(strstr(got.buf, "nvidia2"));
		assert_non_null(strstr(got.buf, "nvidia0,nvidia1,nvidiactl"));
		strbuf_release(&got);
		strbuf_release(&why);
	}
	write_text(path, "");
	/* MIG instances on a GPU: CUDA numbers them instead */
	xsnprintf(path, sizeof(path), "%s/driver/nvidia/capabilities/gpu1/mig/gi3/access", t->proc);
	write_text(path, "");
	assert_true(kb_nvidia_has_mig(t->proc));
	binds_every_node(t, "1", NULL, "MIG instances");
}

static void test_no_driver_or_excluded_gpu(void **state)
{
	struct tree *t = *state;
	char path[256];

	/* a GPU the driver excludes is not numbered by CUDA */
	xsnprintf(path, sizeof(path), "%s/driver/nvidia/gpus/0000:18:00.0/information", t->proc);
	write_text(path, "GPU UUID: GPU-aaaa-0001\nDevice Minor: 2\nGPU Excluded: Yes\n");
	binds_every_node(t, "1", NULL, "excludes GPU 0000:18:00.0");
	/* an information file without a minor */
	write_text(path, "GPU UUID: GPU-aaaa-0001\n");
	binds_every_node(t, "1", NULL, "names no device minor");
	xsnprintf(path, sizeof(path), "%s/driver", t->proc);
	assert_int_equal(kb_rm_rf(path), 0);
	binds_every_node(t, "0", NULL, "no NVIDIA driver listing");
}

/* --- the daemon's leases --- */

static void config(struct kb_config *cfg, enum kb_backend backend, const char *devices,
		   int64_t max_jobs, int64_t per_job)
{
	kb_config_init(cfg);
	cfg->backend = backend;
	free(cfg->devices);
	cfg->devices = xstrdup(devices);
	cfg->bot_max_jobs = max_jobs;
	cfg->bot_devices_per_job = per_job;
}

static void lease_text(const struct strvec *lease, struct strbuf *out)
{
	strbuf_reset(out);
	jdevices_join(lease, out);
}

static void test_leases_disjoint_and_waiting(void **state)
{
	struct kb_config cfg;
	struct jdevices d;
	struct strvec a = STRVEC_INIT, b = STRVEC_INIT, c = STRVEC_INIT;
	struct strbuf s = STRBUF_INIT;
	int ja, jb, jc; /* owners */

	(void)state;
	/* auto: 4 devices / max_jobs 2 = 2 each */
	config(&cfg, KB_BACKEND_CUDA, "0,1,2,3", 2, 0);
	assert_int_equal(jdevices_init(&d, &cfg, "7", "/nonexistent"), 0);
	assert_int_equal(d.per_job, 2);
	assert_int_equal(jdevices_take(&d, &ja, &a), 0);
	assert_int_equal(jdevices_take(&d, &jb, &b), 0);
	lease_text(&a, &s);
	assert_string_equal(s.buf, "0,1");
	lease_text(&b, &s);
	assert_string_equal(s.buf, "2,3");
	/* a third waits, and gets nothing meanwhile */
	assert_int_equal(jdevices_take(&d, &jc, &c), -1);
	assert_int_equal(c.nr, 0);
	/* the first job's end frees its devices for it, and only those */
	jdevices_give_back(&d, &ja);
	assert_int_equal(jdevices_take(&d, &jc, &c), 0);
	lease_text(&c, &s);
	assert_string_equal(s.buf, "0,1");
	jdevices_give_back(&d, &ja); /* twice, or a job that had none: nothing */
	assert_int_equal(jdevices_take(&d, &ja, &a), -1);
	jdevices_give_back(&d, &jb);
	jdevices_give_back(&d, &jc);
	assert_int_equal(jdevices_take(&d, &ja, &a), 0);
	assert_int_equal(jdevices_take(&d, NULL, &b), -1);
	jdevices_release(&d);
	kb_config_release(&cfg);

	/* explicit: 2 of 3 devices; the second job waits for a whole lease */
	config(&cfg, KB_BACKEND_AUTO, "GPU-aa, 5, 6", 4, 2);
	assert_int_equal(jdevices_init(&d, &cfg, NULL, "/nonexistent"), 0);
	assert_int_equal(jdevices_take(&d, &ja, &a), 0);
	lease_text(&a, &s);
	assert_string_equal(s.buf, "GPU-aa,5");
	assert_int_equal(jdevices_take(&d, &jb, &b), -1);
	jdevices_give_back(&d, &ja);
	assert_int_equal(jdevices_take(&d, &jb, &b), 0);
	lease_text(&b, &s);
	assert_string_equal(s.buf, "GPU-aa,5");
	jdevices_release(&d);
	kb_config_release(&cfg);

	strvec_clear(&a);
	strvec_clear(&b);
	strvec_clear(&c);
	strbuf_release(&s);
}

static void test_lease_sizes(void **state)
{
	struct kb_config cfg;
	struct jdevices d;
	struct strvec a = STRVEC_INIT;
	int owners[8];

	(void)state;
	/* more jobs than devices: one each, at least */
	config(&cfg, KB_BACKEND_CUDA, "0,1", 8, 0);
	assert_int_equal(jdevices_init(&d, &cfg, NULL, "/nonexistent"), 0);
	assert_int_equal(d.per_job, 1);
	assert_int_equal(jdevices_take(&d, &owners[0], &a), 0);
	assert_int_equal(jdevices_take(&d, &owners[1], &a), 0);
	assert_int_equal(jdevices_take(&d, &owners[2], &a), -1);
	jdevices_release(&d);
	kb_config_release(&cfg);
	/* 3 devices / 2 jobs: 1 each (the third device idle) */
	config(&cfg, KB_BACKEND_CUDA, "0,1,2", 2, 0);
	assert_int_equal(jdevices_init(&d, &cfg, NULL, "/nonexistent"), 0);
	assert_int_equal(d.per_job, 1);
	jdevices_release(&d);
	kb_config_release(&cfg);
	/* a lease larger than the devices: no job could ever start */
	config(&cfg, KB_BACKEND_CUDA, "0,1", 1, 3);
	assert_int_equal(jdevices_init(&d, &cfg, NULL, "/nonexistent"), -1);
	assert_int_equal(d.ids.nr, 0);
	kb_config_release(&cfg);
	/* the cpu backend leases nothing, whatever the list: every job may start */
	config(&cfg, KB_BACKEND_CPU, "0,1", 4, 1);
	assert_int_equal(jdevices_init(&d, &cfg, "0,1", "/nonexistent"), 0);
	for (size_t i = 0; i < ARRAY_SIZE(owners); i++) {
		assert_int_equal(jdevices_take(&d, &owners[i], &a), 0);
		assert_int_equal(a.nr, 0);
	}
	jdevices_release(&d);
	kb_config_release(&cfg);
	strvec_clear(&a);
}

static void test_lease_auto_sources(void **state)
{
	struct tree *t = *state;
	struct kb_config cfg;
	struct jdevices d;
	struct strbuf s = STRBUF_INIT;

	config(&cfg, KB_BACKEND_AUTO, "auto", 2, 0);
	/* the daemon's CUDA_VISIBLE_DEVICES */
	assert_int_equal(jdevices_init(&d, &cfg, "3,GPU-ab", t->proc), 0);
	lease_text(&d.ids, &s);
	assert_string_equal(s.buf, "3,GPU-ab");
	jdevices_release(&d);
	/* else the driver's GPUs */
	assert_int_equal(jdevices_init(&d, &cfg, NULL, t->proc), 0);
	lease_text(&d.ids, &s);
	assert_string_equal(s.buf, "0,1,2");
	assert_int_equal(d.per_job, 1);
	jdevices_release(&d);
	/* no GPU: none visible, not a device list (warned), no driver */
	assert_int_equal(jdevices_init(&d, &cfg, "", t->proc), 0);
	assert_int_equal(d.ids.nr, 0);
	jdevices_release(&d);
	assert_int_equal(jdevices_init(&d, &cfg, "all", t->proc), 0);
	assert_int_equal(d.ids.nr, 0);
	jdevices_release(&d);
	assert_int_equal(jdevices_init(&d, &cfg, NULL, "/nonexistent"), 0);
	assert_int_equal(d.ids.nr, 0);
	jdevices_release(&d);
	kb_config_release(&cfg);
	strbuf_release(&s);
}

static void test_child_env(void **state)
{
	struct strvec lease = STRVEC_INIT, env = STRVEC_INIT;

	(void)state;
	jdevices_child_env(&lease, &env);
	assert_int_equal(env.nr, 0);
	strvec_pushl(&lease, "2", "3", NULL);
	jdevices_child_env(&lease, &env);
	assert_int_equal(env.nr, 2);
	assert_string_equal(env.v[0], "CUDA_VISIBLE_DEVICES=2,3");
	assert_string_equal(env.v[1], KB_DEVICE_LEASE_ENV "=2,3");
	strvec_clear(&lease);
	strvec_clear(&env);
}

/* --- the lease in the evidence --- */

static void test_placement_lease(void **state)
{
	cJSON *pl = cJSON_CreateObject(), *l;
	char *text;

	(void)state;
	kb_harness_placement_lease(pl, NULL);
	kb_harness_placement_lease(pl, "");
	kb_harness_placement_lease(pl, "0,,1"); /* not a list: warned, not recorded */
	assert_null(cJSON_GetObjectItem(pl, "lease"));
	kb_harness_placement_lease(pl, "0,GPU-ab");
	text = cJSON_PrintUnformatted(pl);
	assert_string_equal(text, "{\"lease\":{\"devices\":[\"0\",\"GPU-ab\"],\"exclusive\":true}}");
	free(text);
	cJSON_Delete(pl);

	assert_null(kb_harness_fresh_placement("cuda", "2,3", NULL));
	pl = kb_harness_fresh_placement("cuda", "2,3", "2,3");
	text = cJSON_PrintUnformatted(pl);
	assert_string_equal(text, "{\"device\":\"2\",\"fresh\":true,\"shared_with\":[],"
			    "\"lease\":{\"devices\":[\"2\",\"3\"],\"exclusive\":true}}");
	free(text);
	cJSON_Delete(pl);
	pl = kb_harness_fresh_placement("cpu", "1", "1");
	assert_string_equal(cJSON_GetObjectItem(pl, "device")->valuestring, "cpu");
	l = cJSON_GetObjectItem(pl, "lease");
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(l, "exclusive")));
	cJSON_Delete(pl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_listing_in_bus_order, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_nodes_of_the_visible_gpus, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_unmappable_binds_every_node, tree_setup, tree_teardown),
		cmocka_unit_test_setup_teardown(test_no_driver_or_excluded_gpu, tree_setup, tree_teardown),
		cmocka_unit_test(test_leases_disjoint_and_waiting),
		cmocka_unit_test(test_lease_sizes),
		cmocka_unit_test_setup_teardown(test_lease_auto_sources, tree_setup, tree_teardown),
		cmocka_unit_test(test_child_env),
		cmocka_unit_test(test_placement_lease),
	};

	log_set_level(getenv("KB_TEST_VERBOSE") ? KB_LOG_DEBUG : KB_LOG_OFF);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
