"""The bare floor's server: the benchmark's settings with CommonMiddleware alone and one URL."""

from bench.settings import *  # noqa: F403

MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "bench.bare_urls"
