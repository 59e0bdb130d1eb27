/*
 * mocknvml.c: the simulator's stand-in for libnvidia-ml.so.1.
 *
 * NVIDIA's own mock NVML (github.com/NVIDIA/k8s-test-infra, pkg/gpu/mocknvml) could not be
 * fetched, so compute_domains.sim builds this library instead (ARCHITECTURE.md section 3). It is
 * written from the public NVML API only. nvidia-ml-py loads it exactly as it loads the real
 * library (dlopen("libnvidia-ml.so.1") through LD_LIBRARY_PATH) and gets its answers from one
 * per-node config file: the one named by the environment variable MOCK_NVML_CONFIG, else the file
 * MOCK_CONFIG_BESIDE next to the loaded library itself. The second is how a simulated node's
 * driver root carries it: a program that loads NVML from the driver root (any driver's kubelet
 * plugin) needs no simulator-only setting, just as with the real library.
 *
 * Build: gcc -shared -fPIC -O2 -Wall -Werror -o libnvidia-ml.so.1 \
 *            -Wl,-soname,libnvidia-ml.so.1 mocknvml.c
 *
 * Config format (rendered by compute_domains.sim.nvml.config; one "key=value" per line, blank
 * lines and lines starting with '#' ignored, whitespace around keys and values trimmed,
 * numbers in decimal or 0x-hex, unknown or repeated keys rejected):
 *
 *   format=1                      required, first section (global)
 *   driver_version=580.95.05      required
 *   cuda_driver_version=13000     required, 1000*major + 10*minor
 *   nvml_version=13.580.95.05     optional, default "<cuda major>.<driver_version>"
 *   init_return=0                 optional nvmlReturn_t that every nvmlInit* returns
 *   [gpu]                         one block per GPU, in index order (at most 64)
 *   uuid=GPU-...                  required, unique
 *   name=NVIDIA GB200             required
 *   pci_bus_id=00000008:01:00.0   required, unique; domain:bus:device.function in hex
 *   pci_device_id=0x294110DE      optional, default 0
 *   pci_subsystem_id=0x0          optional, default 0
 *   minor=0                       optional, default the block's index
 *   architecture=10               optional nvmlDeviceArchitecture_t, default unknown
 *   compute_capability=10.0       optional, default 0.0
 *   memory_total=198670270464     optional bytes, default 0
 *   memory_used=0                 optional bytes, default 0
 *   fabric_return=0               optional: what the fabric-info calls return (3 = no fabric)
 *   fabric_cluster_uuid=...       optional, 32 hex digits (dashes ignored), default zeros
 *   fabric_clique_id=1            optional, default 0
 *   fabric_state=3                optional nvmlGpuFabricState_t, default 0 (not supported)
 *   fabric_status=0               optional nvmlReturn_t, default 0
 *   fabric_health_mask=0xAA       optional, default 0 (V struct only)
 *   fabric_health_summary=1       optional, default 0 (V struct version 3 only)
 *
 * The file is read when the init reference count goes from 0 to 1, so a new config takes
 * effect at the next nvmlInit after every session has shut down. An unset variable or an
 * unreadable file makes nvmlInit return NVML_ERROR_LIBRARY_NOT_FOUND, a malformed file
 * NVML_ERROR_UNKNOWN; both print one "mocknvml: ..." line on stderr. With no [gpu] block,
 * nvmlInit without NVML_INIT_FLAG_NO_GPUS returns NVML_ERROR_DRIVER_NOT_LOADED.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef unsigned int nvmlReturn_t; /* an int-sized enum in nvml.h */

#define NVML_SUCCESS 0u
#define NVML_ERROR_UNINITIALIZED 1u
#define NVML_ERROR_INVALID_ARGUMENT 2u
#define NVML_ERROR_NOT_SUPPORTED 3u
#define NVML_ERROR_NO_PERMISSION 4u
#define NVML_ERROR_ALREADY_INITIALIZED 5u
#define NVML_ERROR_NOT_FOUND 6u
#define NVML_ERROR_INSUFFICIENT_SIZE 7u
#define NVML_ERROR_DRIVER_NOT_LOADED 9u
#define NVML_ERROR_TIMEOUT 10u
#define NVML_ERROR_LIBRARY_NOT_FOUND 12u
#define NVML_ERROR_FUNCTION_NOT_FOUND 13u
#define NVML_ERROR_GPU_IS_LOST 15u
#define NVML_ERROR_INSUFFICIENT_RESOURCES 23u
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25u
#define NVML_ERROR_NOT_READY 27u
#define NVML_ERROR_UNKNOWN 999u

#define NVML_INIT_FLAG_NO_GPUS 1u
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffffu

#define MOCK_MAX_GPUS 64
#define MOCK_FORMAT 1u
#define MOCK_ENV "MOCK_NVML_CONFIG"
#define MOCK_CONFIG_BESIDE "mock-nvml.conf"

/* ---- Structures the caller allocates: byte-for-byte the layouts of nvml.h. ---- */

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

/*
 * nvml.h declares `state` as an unsigned char followed by three bytes of padding, while
 * nvidia-ml-py mirrors it as a c_uint. Writing it as an unsigned int fills the padding too,
 * so both readers see the right value whatever the caller's buffer held; offsets and sizes
 * are identical either way.
 */
typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
    unsigned int healthMask;
    unsigned char healthSummary; /* version 3 only: never written for version 2 callers */
} nvmlGpuFabricInfoV_t;

#define MOCK_MEMORY_V2 ((unsigned int)sizeof(nvmlMemory_v2_t) | (2u << 24))
#define MOCK_FABRIC_V2 ((unsigned int)offsetof(nvmlGpuFabricInfoV_t, healthSummary) | (2u << 24))
#define MOCK_FABRIC_V3 ((unsigned int)sizeof(nvmlGpuFabricInfoV_t) | (3u << 24))

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t layout");
_Static_assert(MOCK_MEMORY_V2 == 0x02000028u, "nvmlMemory_v2 version");
_Static_assert(MOCK_FABRIC_V2 == 0x02000024u, "nvmlGpuFabricInfo_v2 version");
_Static_assert(MOCK_FABRIC_V3 == 0x03000028u, "nvmlGpuFabricInfo_v3 version");

/* ---- The loaded config. Device handles point into `gpus`. ---- */

struct nvmlDevice_st {
    char uuid[96];
    char name[96];
    char bus_id[32];
    unsigned int pci_domain, pci_bus, pci_device, pci_function;
    unsigned int pci_device_id, pci_subsystem_id;
    unsigned int minor, architecture, cc_major, cc_minor;
    unsigned long long memory_total, memory_used;
    nvmlReturn_t fabric_return;
    unsigned char cluster_uuid[16];
    unsigned int clique_id, fabric_state;
    nvmlReturn_t fabric_status;
    unsigned int health_mask, health_summary;
};
typedef struct nvmlDevice_st *nvmlDevice_t;

struct mock_config {
    unsigned int format;
    char driver_version[80];
    char nvml_version[80];
    unsigned int cuda_driver_version;
    nvmlReturn_t init_return;
    unsigned int count;
    struct nvmlDevice_st gpus[MOCK_MAX_GPUS];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_refcount; /* > 0 means initialised and g_config is immutable */
static struct mock_config g_config;

/* ---- Config parsing: a table of keys per section. ---- */

enum kind { K_STR, K_U8, K_U32, K_U64, K_BUSID, K_UUID16, K_CC };

struct key {
    const char *name;
    enum kind kind;
    size_t offset;
    size_t size;
    int required;
};

#define FIELD(type, member) offsetof(type, member), sizeof(((type *)0)->member)

static const struct key k_global[] = {
    {"format", K_U32, FIELD(struct mock_config, format), 1},
    {"driver_version", K_STR, FIELD(struct mock_config, driver_version), 1},
    {"cuda_driver_version", K_U32, FIELD(struct mock_config, cuda_driver_version), 1},
    {"nvml_version", K_STR, FIELD(struct mock_config, nvml_version), 0},
    {"init_return", K_U32, FIELD(struct mock_config, init_return), 0},
};

static const struct key k_gpu[] = {
    {"uuid", K_STR, FIELD(struct nvmlDevice_st, uuid), 1},
    {"name", K_STR, FIELD(struct nvmlDevice_st, name), 1},
    {"pci_bus_id", K_BUSID, FIELD(struct nvmlDevice_st, bus_id), 1},
    {"pci_device_id", K_U32, FIELD(struct nvmlDevice_st, pci_device_id), 0},
    {"pci_subsystem_id", K_U32, FIELD(struct nvmlDevice_st, pci_subsystem_id), 0},
    {"minor", K_U32, FIELD(struct nvmlDevice_st, minor), 0},
    {"architecture", K_U32, FIELD(struct nvmlDevice_st, architecture), 0},
    {"compute_capability", K_CC, FIELD(struct nvmlDevice_st, cc_major), 0},
    {"memory_total", K_U64, FIELD(struct nvmlDevice_st, memory_total), 0},
    {"memory_used", K_U64, FIELD(struct nvmlDevice_st, memory_used), 0},
    {"fabric_return", K_U32, FIELD(struct nvmlDevice_st, fabric_return), 0},
    {"fabric_cluster_uuid", K_UUID16, FIELD(struct nvmlDevice_st, cluster_uuid), 0},
    {"fabric_clique_id", K_U32, FIELD(struct nvmlDevice_st, clique_id), 0},
    {"fabric_state", K_U8, FIELD(struct nvmlDevice_st, fabric_state), 0},
    {"fabric_status", K_U32, FIELD(struct nvmlDevice_st, fabric_status), 0},
    {"fabric_health_mask", K_U32, FIELD(struct nvmlDevice_st, health_mask), 0},
    {"fabric_health_summary", K_U8, FIELD(struct nvmlDevice_st, health_summary), 0},
};

#define N_GLOBAL (sizeof(k_global) / sizeof(k_global[0]))
#define N_GPU (sizeof(k_gpu) / sizeof(k_gpu[0]))
_Static_assert(N_GLOBAL < 64 && N_GPU < 64, "seen-key masks are 64 bits");

static const char *parse_u64(const char *s, unsigned long long max, unsigned long long *out) {
    int base = 10;
    char *end = NULL;
    unsigned long long v;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    }
    if (*s == '\0' || *s == '-' || *s == '+' || *s == ' ')
        return "expected an unsigned decimal or 0x-hex number";
    errno = 0;
    v = strtoull(s, &end, base);
    if (errno != 0 || *end != '\0')
        return "expected an unsigned decimal or 0x-hex number";
    if (v > max)
        return "number out of range";
    *out = v;
    return NULL;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static const char *parse_uuid16(const char *s, unsigned char out[16]) {
    unsigned int n = 0;
    for (; *s; s++) {
        int d;
        if (*s == '-') continue;
        d = hex_digit(*s);
        if (d < 0 || n >= 32) return "expected 32 hex digits (dashes allowed)";
        if (n % 2 == 0) out[n / 2] = (unsigned char)(d << 4);
        else out[n / 2] |= (unsigned char)d;
        n++;
    }
    return n == 32 ? NULL : "expected 32 hex digits (dashes allowed)";
}

/* "domain:bus:device.function" or "bus:device.function" (domain 0), all hex. */
static int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev,
                        unsigned int *fn) {
    int used = -1;
    *dom = 0;
    if (sscanf(s, "%x:%x:%x.%x%n", dom, bus, dev, fn, &used) != 4 || used < 0 || s[used]) {
        used = -1;
        *dom = 0;
        if (sscanf(s, "%x:%x.%x%n", bus, dev, fn, &used) != 3 || used < 0 || s[used]) return 0;
    }
    return *bus <= 0xff && *dev <= 0x1f && *fn <= 7;
}

static const char *set_value(const struct key *k, void *base, const char *value) {
    char *field = (char *)base + k->offset;
    unsigned long long v = 0;
    const char *err = NULL;
    struct nvmlDevice_st *gpu = base;
    switch (k->kind) {
    case K_STR:
        if (strlen(value) >= k->size) return "value too long";
        memcpy(field, value, strlen(value) + 1);
        return NULL;
    case K_U8:
    case K_U32:
        if ((err = parse_u64(value, k->kind == K_U8 ? 0xffu : UINT_MAX, &v))) return err;
        *(unsigned int *)(void *)field = (unsigned int)v;
        return NULL;
    case K_U64:
        if ((err = parse_u64(value, ULLONG_MAX, &v))) return err;
        *(unsigned long long *)(void *)field = v;
        return NULL;
    case K_UUID16:
        return parse_uuid16(value, (unsigned char *)field);
    case K_CC: {
        unsigned int major, minor;
        int used = -1;
        if (sscanf(value, "%u.%u%n", &major, &minor, &used) != 2 || used < 0 || value[used])
            return "expected <major>.<minor>";
        gpu->cc_major = major;
        gpu->cc_minor = minor;
        return NULL;
    }
    case K_BUSID:
        if (!parse_bus_id(value, &gpu->pci_domain, &gpu->pci_bus, &gpu->pci_device,
                          &gpu->pci_function))
            return "expected a PCI bus id domain:bus:device.function (hex)";
        snprintf(gpu->bus_id, sizeof(gpu->bus_id), "%08X:%02X:%02X.%X", gpu->pci_domain,
                 gpu->pci_bus, gpu->pci_device, gpu->pci_function);
        return NULL;
    }
    return "internal error: unknown key kind";
}

static char *trim(char *s) {
    char *end;
    while (*s == ' ' || *s == '\t') s++;
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r'))
        *--end = '\0';
    return s;
}

static void complain(const char *path, unsigned int line, const char *what, const char *detail) {
    if (line) fprintf(stderr, "mocknvml: %s:%u: %s%s%s\n", path, line, what,
                      detail ? ": " : "", detail ? detail : "");
    else fprintf(stderr, "mocknvml: %s: %s%s%s\n", path, what, detail ? ": " : "",
                 detail ? detail : "");
}

/* Check the section just finished and apply its defaults; returns a missing key or NULL. */
static const char *close_section(struct mock_config *c, const struct key *keys, size_t n,
                                 uint64_t seen) {
    size_t i;
    for (i = 0; i < n; i++) {
        int given = (seen & ((uint64_t)1 << i)) != 0;
        if (keys[i].required && !given) return keys[i].name;
        if (keys == k_gpu && !given && !strcmp(keys[i].name, "minor"))
            c->gpus[c->count - 1].minor = c->count - 1;
    }
    return NULL;
}

static nvmlReturn_t finish(struct mock_config *c, const char *path) {
    unsigned int i, j;
    if (c->format != MOCK_FORMAT) {
        complain(path, 0, "unsupported format (this library reads format=1)", NULL);
        return NVML_ERROR_UNKNOWN;
    }
    if (c->nvml_version[0] == '\0') {
        char buf[sizeof(c->nvml_version) + 16];
        snprintf(buf, sizeof(buf), "%u.%s", c->cuda_driver_version / 1000, c->driver_version);
        if (strlen(buf) >= sizeof(c->nvml_version)) {
            complain(path, 0, "driver_version too long", NULL);
            return NVML_ERROR_UNKNOWN;
        }
        memcpy(c->nvml_version, buf, strlen(buf) + 1);
    }
    for (i = 0; i < c->count; i++)
        for (j = 0; j < i; j++) {
            if (!strcmp(c->gpus[i].uuid, c->gpus[j].uuid)) {
                complain(path, 0, "duplicate GPU uuid", c->gpus[i].uuid);
                return NVML_ERROR_UNKNOWN;
            }
            if (!strcmp(c->gpus[i].bus_id, c->gpus[j].bus_id)) {
                complain(path, 0, "duplicate GPU pci_bus_id", c->gpus[i].bus_id);
                return NVML_ERROR_UNKNOWN;
            }
        }
    return NVML_SUCCESS;
}

/* The config file next to this library ("<dir of libnvidia-ml.so.1>/mock-nvml.conf"), found
 * through the dynamic linker; -1 when it cannot be named or does not exist. */
static int config_beside_library(char *out, size_t size) {
    Dl_info info;
    const char *slash;
    int n;
    if (!dladdr((void *)&config_beside_library, &info) || !info.dli_fname) return -1;
    slash = strrchr(info.dli_fname, '/');
    if (!slash) return -1;
    n = snprintf(out, size, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                 MOCK_CONFIG_BESIDE);
    if (n < 0 || (size_t)n >= size) return -1;
    return access(out, R_OK) == 0 ? 0 : -1;
}

static nvmlReturn_t load_config(struct mock_config *c) {
    const char *path = getenv(MOCK_ENV);
    FILE *f;
    char *buf = NULL;
    size_t cap = 0;
    unsigned int line = 0;
    uint64_t seen = 0;
    const struct key *keys = k_global;
    size_t nkeys = N_GLOBAL;
    void *base = c;
    const char *missing;
    nvmlReturn_t rc = NVML_SUCCESS;

    char beside[4096];

    memset(c, 0, sizeof(*c));
    if ((!path || !*path) && config_beside_library(beside, sizeof(beside)) == 0)
        path = beside;
    if (!path || !*path) {
        fprintf(stderr, "mocknvml: " MOCK_ENV " is not set and no " MOCK_CONFIG_BESIDE
                        " lies next to the library; point it at a mock NVML config\n");
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    }
    if (!(f = fopen(path, "r"))) {
        complain(path, 0, "cannot open the mock NVML config", strerror(errno));
        return NVML_ERROR_LIBRARY_NOT_FOUND;
    }
    while (rc == NVML_SUCCESS && getline(&buf, &cap, f) >= 0) {
        char *s = trim(buf), *eq, *value;
        const char *err;
        size_t i;
        line++;
        if (!*s || *s == '#') continue;
        if (*s == '[') {
            if (strcmp(s, "[gpu]") != 0) {
                complain(path, line, "unknown section", s);
                rc = NVML_ERROR_UNKNOWN;
            } else if ((missing = close_section(c, keys, nkeys, seen))) {
                complain(path, line, "the section before this line lacks required key", missing);
                rc = NVML_ERROR_UNKNOWN;
            } else if (c->count >= MOCK_MAX_GPUS) {
                complain(path, line, "too many [gpu] blocks (at most 64)", NULL);
                rc = NVML_ERROR_UNKNOWN;
            } else {
                struct nvmlDevice_st *gpu = &c->gpus[c->count++];
                gpu->architecture = NVML_DEVICE_ARCH_UNKNOWN;
                keys = k_gpu;
                nkeys = N_GPU;
                base = gpu;
                seen = 0;
            }
            continue;
        }
        if (!(eq = strchr(s, '='))) {
            complain(path, line, "expected key=value", s);
            rc = NVML_ERROR_UNKNOWN;
            continue;
        }
        *eq = '\0';
        value = trim(eq + 1);
        s = trim(s);
        for (i = 0; i < nkeys && strcmp(keys[i].name, s) != 0; i++) {}
        if (i == nkeys) {
            complain(path, line, keys == k_gpu ? "unknown [gpu] key" : "unknown global key", s);
            rc = NVML_ERROR_UNKNOWN;
        } else if (seen & ((uint64_t)1 << i)) {
            complain(path, line, "repeated key", s);
            rc = NVML_ERROR_UNKNOWN;
        } else if ((err = set_value(&keys[i], base, value))) {
            complain(path, line, err, s);
            rc = NVML_ERROR_UNKNOWN;
        }
        seen |= (uint64_t)1 << i;
    }
    free(buf);
    if (ferror(f) && rc == NVML_SUCCESS) {
        complain(path, 0, "cannot read the mock NVML config", strerror(errno));
        rc = NVML_ERROR_LIBRARY_NOT_FOUND;
    }
    fclose(f);
    if (rc != NVML_SUCCESS) return rc;
    if ((missing = close_section(c, keys, nkeys, seen))) {
        complain(path, 0, "the last section lacks required key", missing);
        return NVML_ERROR_UNKNOWN;
    }
    return finish(c, path);
}

/* ---- Helpers for the entry points. Every entry point holds g_lock while it runs. ---- */

static nvmlReturn_t enter(void) {
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        pthread_mutex_unlock(&g_lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t leave(nvmlReturn_t rc) {
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Lock, check initialisation and the handle; on success the lock stays held. */
static nvmlReturn_t enter_device(nvmlDevice_t h) {
    uintptr_t p = (uintptr_t)h, b = (uintptr_t)g_config.gpus;
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS) return rc;
    if (p < b || (p - b) % sizeof(*h) != 0 || (p - b) / sizeof(*h) >= g_config.count)
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src) {
    size_t n = strlen(src);
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (length < n + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}

/* ---- Initialisation and errors. ---- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        rc = load_config(&g_config);
        if (rc == NVML_SUCCESS && g_config.init_return != NVML_SUCCESS) rc = g_config.init_return;
        if (rc == NVML_SUCCESS && g_config.count == 0 && !(flags & NVML_INIT_FLAG_NO_GPUS))
            rc = NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (rc == NVML_SUCCESS) g_refcount++;
    return leave(rc);
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS) return rc;
    g_refcount--;
    return leave(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    default: return "Unknown Error";
    }
}

/* ---- System queries. ---- */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS) return rc;
    return leave(copy_string(version, length, g_config.driver_version));
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS) return rc;
    return leave(copy_string(version, length, g_config.nvml_version));
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS) return rc;
    if (!cudaDriverVersion) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *cudaDriverVersion = (int)g_config.cuda_driver_version;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion);
}

/* ---- Device enumeration. ---- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS) return rc;
    if (!deviceCount) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *deviceCount = g_config.count;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
    return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS) return rc;
    if (!device || index >= g_config.count) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *device = &g_config.gpus[index];
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    unsigned int i;
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS) return rc;
    if (!uuid || !device) return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (i = 0; i < g_config.count; i++)
        if (!strcmp(g_config.gpus[i].uuid, uuid)) {
            *device = &g_config.gpus[i];
            return leave(NVML_SUCCESS);
        }
    return leave(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    unsigned int i, dom, bus, dev, fn;
    nvmlReturn_t rc = enter();
    if (rc != NVML_SUCCESS) return rc;
    if (!pciBusId || !device || !parse_bus_id(pciBusId, &dom, &bus, &dev, &fn))
        return leave(NVML_ERROR_INVALID_ARGUMENT);
    for (i = 0; i < g_config.count; i++) {
        const struct nvmlDevice_st *g = &g_config.gpus[i];
        if (g->pci_domain == dom && g->pci_bus == bus && g->pci_device == dev &&
            g->pci_function == fn) {
            *device = &g_config.gpus[i];
            return leave(NVML_SUCCESS);
        }
    }
    return leave(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ---- Per-device queries. ---- */

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    return leave(copy_string(uuid, length, device->uuid));
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    return leave(copy_string(name, length, device->name));
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (!index) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *index = (unsigned int)(device - g_config.gpus);
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (!minorNumber) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *minorNumber = device->minor;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (!pci) return leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X",
             device->pci_domain & 0xffffu, device->pci_bus, device->pci_device,
             device->pci_function);
    memcpy(pci->busId, device->bus_id, sizeof(pci->busId));
    pci->domain = device->pci_domain;
    pci->bus = device->pci_bus;
    pci->device = device->pci_device;
    pci->pciDeviceId = device->pci_device_id;
    pci->pciSubSystemId = device->pci_subsystem_id;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (!memory) return leave(NVML_ERROR_INVALID_ARGUMENT);
    memory->total = device->memory_total;
    memory->used = device->memory_used;
    memory->free = device->memory_total - device->memory_used;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (!memory) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != MOCK_MEMORY_V2) return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    memory->total = device->memory_total;
    memory->reserved = 0;
    memory->used = device->memory_used;
    memory->free = device->memory_total - device->memory_used;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (!arch) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *arch = device->architecture;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (!major || !minor) return leave(NVML_ERROR_INVALID_ARGUMENT);
    *major = (int)device->cc_major;
    *minor = (int)device->cc_minor;
    return leave(NVML_SUCCESS);
}

/* ---- Fabric (multi-node NVLink) information. ---- */

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (!info) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (device->fabric_return != NVML_SUCCESS) return leave(device->fabric_return);
    memcpy(info->clusterUuid, device->cluster_uuid, sizeof(info->clusterUuid));
    info->status = device->fabric_status;
    info->cliqueId = device->clique_id;
    info->state = device->fabric_state;
    return leave(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info) {
    nvmlReturn_t rc = enter_device(device);
    if (rc != NVML_SUCCESS) return rc;
    if (!info) return leave(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != MOCK_FABRIC_V2 && info->version != MOCK_FABRIC_V3)
        return leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (device->fabric_return != NVML_SUCCESS) return leave(device->fabric_return);
    memcpy(info->clusterUuid, device->cluster_uuid, sizeof(info->clusterUuid));
    info->status = device->fabric_status;
    info->cliqueId = device->clique_id;
    info->state = device->fabric_state;
    info->healthMask = device->health_mask;
    if (info->version == MOCK_FABRIC_V3) info->healthSummary = (unsigned char)device->health_summary;
    return leave(NVML_SUCCESS);
}
