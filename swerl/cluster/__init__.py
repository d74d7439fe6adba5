"""Run swerl on clusters: Ray on Slurm (sbatch), KubeRay (RayCluster/RayJob)."""
