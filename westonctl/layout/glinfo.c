/*
 * The GL driver weston composites with, said in weston's log at start, and a warning with the
 * fix when it is a software rasterizer.
 *
 * Why: a card Mesa has no driver for (a proprietary one, simpledrm) still gets GL, from
 * kms_swrast on llvmpipe, so weston starts and no fallback happens, but every frame is drawn
 * on the CPU, at several times the CPU a frame of pixman, which only copies. The owner of such
 * a node wants the pixman overlay, and this line is where they learn it.
 *
 * The module links neither EGL nor GLES: the pixman image has no Mesa. The GL renderer has
 * loaded both libraries when it runs, and left its context current after setting up (the
 * shell is loaded after the backend and its renderer), so the functions are looked up in the
 * libraries already loaded and asked nothing else. Where either is missing, weston is not
 * composing with GL and nothing is said.
 */

#define _GNU_SOURCE

#include <dlfcn.h>
#include <string.h>

#include "layout.h"

#define GL_RENDERER_NAME 0x1F01	/* GL_RENDERER, GLES2/gl2.h */

/* Mesa's GL_RENDERER strings for its CPU rasterizers: "llvmpipe (LLVM 19.1.7, 256 bits)",
 * "softpipe", and "swrast" in older releases. */
static const char *const software[] = { "llvmpipe", "softpipe", "swrast" };

static void *
loaded(const char *library)
{
	return dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
}

bool
glinfo_is_software(const char *renderer)
{
	size_t i;

	for (i = 0; i < sizeof(software) / sizeof(software[0]); i++)
		if (strstr(renderer, software[i]))
			return true;
	return false;
}

void
glinfo_report(void)
{
	void *egl = loaded("libEGL.so.1");
	void *gles = loaded("libGLESv2.so.2");
	void *(*current_context)(void);
	const unsigned char *(*get_string)(unsigned int);
	const char *renderer = NULL;

	if (egl && gles) {
		*(void **)&current_context = dlsym(egl, "eglGetCurrentContext");
		*(void **)&get_string = dlsym(gles, "glGetString");
		if (current_context && get_string && current_context())
			renderer = (const char *)get_string(GL_RENDERER_NAME);
	}
	if (renderer) {
		weston_log("layout: GL renderer: %s\n", renderer);
		if (glinfo_is_software(renderer))
			weston_log("layout: warning: GL runs on the CPU (%s): Mesa has no GL driver "
				   "for this card, and every frame costs more CPU than weston's pixman "
				   "renderer; run pixman on this node: kubectl apply -k "
				   "deploy/overlays/pixman-renderer\n", renderer);
	}
	if (egl)
		dlclose(egl);
	if (gles)
		dlclose(gles);
}
