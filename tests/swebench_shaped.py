"""A task image shaped like SWE-bench's, built locally (no conda, no registry).

Real SWE-bench images put conda in /opt/miniconda3 (its bin on PATH) and the repo's
environment ``testbed`` in /opt/miniconda3/envs; ``/root/.bashrc`` is the one line
``source /opt/miniconda3/etc/profile.d/conda.sh && conda activate testbed``, which a
login shell reads through ``~/.profile``, and a plain ``bash -c`` never reads. Here
``testbed`` is a venv, ``conda.sh`` defines a ``conda`` function that knows only
``activate``, and the module ``testbed_dep`` stands for the repo's dependencies:
importable inside the environment only.
"""

from __future__ import annotations

import hashlib
import io
import tarfile

CONDA_SH = """\
# conda-shaped: `conda activate ENV` puts /opt/miniconda3/envs/ENV first on PATH, as conda does
conda() {
    if [ "$1" != activate ] || [ ! -d "/opt/miniconda3/envs/$2" ]; then
        echo "conda (swerl test image): only 'conda activate ENV' of an existing ENV" >&2
        return 1
    fi
    export CONDA_PREFIX="/opt/miniconda3/envs/$2" CONDA_DEFAULT_ENV="$2"
    export PATH="$CONDA_PREFIX/bin:$PATH"
}
"""

DOCKERFILE = """\
FROM {image}
RUN python3 -m venv --system-site-packages --without-pip /opt/miniconda3/envs/testbed \\
 && mkdir -p /opt/miniconda3/bin /opt/miniconda3/etc/profile.d \\
 && d=$(/opt/miniconda3/envs/testbed/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \\
 && mkdir -p "$d/testbed_dep" && echo 'WHERE = "testbed"' > "$d/testbed_dep/__init__.py"
COPY conda.sh /opt/miniconda3/etc/profile.d/conda.sh
RUN echo "source /opt/miniconda3/etc/profile.d/conda.sh && conda activate testbed" > /root/.bashrc
ENV PATH=/opt/miniconda3/bin:$PATH
"""


def build(client, image: str) -> str:
    """The SWE-bench-shaped variant of ``image``; built once per recipe, then reused."""
    import docker.errors

    dockerfile = DOCKERFILE.format(image=image)
    base_id = client.images.get(image).id
    digest = hashlib.sha256((dockerfile + CONDA_SH + base_id).encode()).hexdigest()[:12]
    name = f"swerl-test-swebench-shaped:{digest}"
    try:
        client.images.get(name)
        return name
    except docker.errors.ImageNotFound:
        pass
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for arcname, text in (("Dockerfile", dockerfile), ("conda.sh", CONDA_SH)):
            data = text.encode()
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    client.images.build(
        fileobj=buf, custom_context=True, tag=name, pull=False, network_mode="none", rm=True, forcerm=True
    )
    return name
